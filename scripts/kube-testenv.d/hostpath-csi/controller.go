package main

// Controller service: volumes (empty, from a snapshot, or cloned from a volume) and snapshots, each
// a directory of the store. Topology, attach, expansion and capacity are not offered.

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

type controllerServer struct {
	csi.UnimplementedControllerServer
	store *store
}

func (c *controllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	} {
		rpc := &csi.ControllerServiceCapability_RPC{Type: t}
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: rpc}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// checkCapabilities accepts mounted filesystems in any access mode (one node: every mode is local).
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	for _, c := range caps {
		if c.GetMount() == nil {
			return status.Error(codes.InvalidArgument, "only mount volumes are offered, not block")
		}
		if fs := c.GetMount().GetFsType(); fs != "" {
			return status.Errorf(codes.InvalidArgument, "fs type %q: volumes are directories, no filesystem is made", fs)
		}
	}
	return nil
}

func (c *controllerServer) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	id := req.GetName()
	if !safeID.MatchString(id) {
		return nil, status.Errorf(codes.InvalidArgument, "volume name %q: want 1-128 of [A-Za-z0-9._-], not starting with a dot", id)
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	capacity := req.GetCapacityRange().GetRequiredBytes()
	if limit := req.GetCapacityRange().GetLimitBytes(); capacity == 0 && limit > 0 {
		capacity = limit
	}
	want := volumeRecord{ID: id, CapacityBytes: capacity}
	if snap := req.GetVolumeContentSource().GetSnapshot(); snap != nil {
		want.SourceKind, want.SourceID = "snapshot", snap.GetSnapshotId()
	} else if vol := req.GetVolumeContentSource().GetVolume(); vol != nil {
		want.SourceKind, want.SourceID = "volume", vol.GetVolumeId()
	}
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	var have volumeRecord
	switch err := c.store.read("volumes", id, &have); {
	case err == nil:
		if have.SourceKind != want.SourceKind || have.SourceID != want.SourceID || !fits(have.CapacityBytes, req.GetCapacityRange()) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with another source or capacity", id)
		}
		return volumeResponse(have, req.GetVolumeContentSource()), nil
	case !errors.Is(err, errNotFound):
		return nil, status.Error(codes.Internal, err.Error())
	}
	source := ""
	switch want.SourceKind {
	case "snapshot":
		var snap snapshotRecord
		if err := c.store.read("snapshots", want.SourceID, &snap); err != nil {
			return nil, notFoundOr(err, "snapshot", want.SourceID)
		}
		source = c.store.dataDir("snapshots", want.SourceID)
	case "volume":
		var vol volumeRecord
		if err := c.store.read("volumes", want.SourceID, &vol); err != nil {
			return nil, notFoundOr(err, "source volume", want.SourceID)
		}
		source = c.store.dataDir("volumes", want.SourceID)
	}
	if err := c.store.create("volumes", id, source, want); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return volumeResponse(want, req.GetVolumeContentSource()), nil
}

// fits says whether an existing volume of size have satisfies the capacity range asked again.
func fits(have int64, r *csi.CapacityRange) bool {
	return have >= r.GetRequiredBytes() && (r.GetLimitBytes() == 0 || have <= r.GetLimitBytes())
}

func volumeResponse(rec volumeRecord, source *csi.VolumeContentSource) *csi.CreateVolumeResponse {
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: rec.ID, CapacityBytes: rec.CapacityBytes, ContentSource: source}}
}

func notFoundOr(err error, what, id string) error {
	if errors.Is(err, errNotFound) {
		return status.Errorf(codes.NotFound, "%s %s not found", what, id)
	}
	return status.Error(codes.Internal, err.Error())
}

func (c *controllerServer) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if err := c.remove("volumes", "volume", req.GetVolumeId()); err != nil {
		return nil, err
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// remove deletes one volume or snapshot (kind: its store directory); one already gone is no error,
// as the spec asks of a repeated delete.
func (c *controllerServer) remove(kind, what, id string) error {
	if id == "" {
		return status.Errorf(codes.InvalidArgument, "%s id is required", what)
	}
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	if err := c.store.remove(kind, id); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

func (c *controllerServer) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	var vol volumeRecord
	if err := c.store.read("volumes", req.GetVolumeId(), &vol); err != nil {
		return nil, notFoundOr(err, "volume", req.GetVolumeId())
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

func (c *controllerServer) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	id, source := req.GetName(), req.GetSourceVolumeId()
	if !safeID.MatchString(id) {
		return nil, status.Errorf(codes.InvalidArgument, "snapshot name %q: want 1-128 of [A-Za-z0-9._-], not starting with a dot", id)
	}
	if source == "" {
		return nil, status.Error(codes.InvalidArgument, "source volume id is required")
	}
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	var have snapshotRecord
	switch err := c.store.read("snapshots", id, &have); {
	case err == nil:
		if have.SourceVolumeID != source {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %s exists, of volume %s", id, have.SourceVolumeID)
		}
		return &csi.CreateSnapshotResponse{Snapshot: snapshotMessage(have)}, nil
	case !errors.Is(err, errNotFound):
		return nil, status.Error(codes.Internal, err.Error())
	}
	var vol volumeRecord
	if err := c.store.read("volumes", source, &vol); err != nil {
		return nil, notFoundOr(err, "source volume", source)
	}
	rec := snapshotRecord{ID: id, SourceVolumeID: source, SizeBytes: vol.CapacityBytes, CreatedNanos: time.Now().UnixNano()}
	if err := c.store.create("snapshots", id, c.store.dataDir("volumes", source), rec); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.CreateSnapshotResponse{Snapshot: snapshotMessage(rec)}, nil
}

// snapshotMessage: a snapshot is ready as soon as it exists, its copy being made before it is recorded.
func snapshotMessage(rec snapshotRecord) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     rec.ID,
		SourceVolumeId: rec.SourceVolumeID,
		SizeBytes:      rec.SizeBytes,
		CreationTime:   timestamppb.New(time.Unix(0, rec.CreatedNanos)),
		ReadyToUse:     true,
	}
}

func (c *controllerServer) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if err := c.remove("snapshots", "snapshot", req.GetSnapshotId()); err != nil {
		return nil, err
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

func (c *controllerServer) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	c.store.mu.Lock()
	all, err := c.store.snapshots()
	c.store.mu.Unlock()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	var matching []snapshotRecord
	for _, rec := range all {
		if (req.GetSnapshotId() == "" || rec.ID == req.GetSnapshotId()) &&
			(req.GetSourceVolumeId() == "" || rec.SourceVolumeID == req.GetSourceVolumeId()) {
			matching = append(matching, rec)
		}
	}
	start := 0
	if token := req.GetStartingToken(); token != "" {
		n, err := strconv.Atoi(token)
		if err != nil || n < 0 || n > len(matching) {
			return nil, status.Errorf(codes.Aborted, "starting token %q is not one this driver gave", token)
		}
		start = n
	}
	end := len(matching)
	if max := int(req.GetMaxEntries()); max > 0 && start+max < end {
		end = start + max
	}
	resp := &csi.ListSnapshotsResponse{}
	for _, rec := range matching[start:end] {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: snapshotMessage(rec)})
	}
	if end < len(matching) {
		resp.NextToken = strconv.Itoa(end)
	}
	return resp, nil
}
