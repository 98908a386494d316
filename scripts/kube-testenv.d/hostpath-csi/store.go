package main

// The state dir: volumes/<id>/ and snapshots/<id>/ hold the data, <id>.json beside each its
// record. An id is the name the CO gave (the provisioner's pvc-<uid>, the snapshotter's
// snapshot-<uid>), so a second create with the same name finds the first one's record: creates are
// idempotent by name, as the spec asks. A copy goes to <id>.tmp and is renamed into place, and the
// record is written last, so a crash mid-copy leaves no half volume that counts as made.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
)

// safeID keeps every id one plain path element: no separators, no leading dot.
var safeID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

type volumeRecord struct {
	ID            string `json:"id"`
	CapacityBytes int64  `json:"capacityBytes"`
	SourceKind    string `json:"sourceKind,omitempty"` // "snapshot", "volume" or empty
	SourceID      string `json:"sourceId,omitempty"`
}

type snapshotRecord struct {
	ID             string `json:"id"`
	SourceVolumeID string `json:"sourceVolumeId"`
	SizeBytes      int64  `json:"sizeBytes"` // the source volume's capacity: what a restore needs
	CreatedNanos   int64  `json:"createdNanos"`
}

type store struct {
	mu   sync.Mutex // one change at a time: copies are small, and order is easy to reason about
	root string
}

var errNotFound = errors.New("not found")

func openStore(root string) (*store, error) {
	for _, kind := range []string{"volumes", "snapshots"} {
		if err := os.MkdirAll(filepath.Join(root, kind), 0o700); err != nil {
			return nil, err
		}
	}
	return &store{root: root}, nil
}

func (s *store) dataDir(kind, id string) string { return filepath.Join(s.root, kind, id) }

func (s *store) recordPath(kind, id string) string { return filepath.Join(s.root, kind, id+".json") }

// read loads kind/id's record into out; errNotFound when there is none.
func (s *store) read(kind, id string, out any) error {
	if !safeID.MatchString(id) {
		return errNotFound // an id this driver never hands out
	}
	data, err := os.ReadFile(s.recordPath(kind, id))
	if errors.Is(err, os.ErrNotExist) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	return json.Unmarshal(data, out)
}

// create makes kind/id: an empty directory, or a copy of source (a data dir) when given; then its record.
func (s *store) create(kind, id, source string, record any) error {
	dir := s.dataDir(kind, id)
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil { // left by a crash mid-copy
		return err
	}
	if source == "" {
		if err := os.Mkdir(tmp, 0o755); err != nil {
			return err
		}
	} else if out, err := exec.Command("cp", "-a", "--", source, tmp).CombinedOutput(); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("cp -a %s: %v: %s", source, err, out)
	}
	if err := os.RemoveAll(dir); err != nil { // a data dir without a record never counted as made
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	data, err := json.Marshal(record)
	if err != nil {
		return err
	}
	if err := os.WriteFile(s.recordPath(kind, id)+".tmp", data, 0o600); err != nil {
		return err
	}
	return os.Rename(s.recordPath(kind, id)+".tmp", s.recordPath(kind, id))
}

// remove deletes kind/id's record, then its data; removing what is not there succeeds.
func (s *store) remove(kind, id string) error {
	if !safeID.MatchString(id) {
		return nil
	}
	if err := os.Remove(s.recordPath(kind, id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.RemoveAll(s.dataDir(kind, id))
}

// snapshots lists every snapshot's record, by id.
func (s *store) snapshots() ([]snapshotRecord, error) {
	paths, err := filepath.Glob(filepath.Join(s.root, "snapshots", "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	out := make([]snapshotRecord, 0, len(paths))
	for _, p := range paths {
		var rec snapshotRecord
		id := filepath.Base(p[:len(p)-len(".json")])
		if err := s.read("snapshots", id, &rec); err != nil {
			if errors.Is(err, errNotFound) {
				continue // deleted meanwhile
			}
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}
