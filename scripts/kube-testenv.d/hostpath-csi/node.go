package main

// Node service: publishing a volume bind-mounts its directory onto kubelet's target (read-only
// when asked, always nosuid and nodev); unpublishing unmounts it and removes the target. No
// staging: kubelet calls publish directly.

import (
	"bufio"
	"context"
	"errors"
	"log"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type nodeServer struct {
	csi.UnimplementedNodeServer
	nodeID    string
	store     *store
	mu        sync.Mutex
	published map[string]bool // targets mounted by this process, unmounted when it stops
}

func (n *nodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: n.nodeID}, nil
}

func (n *nodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

func (n *nodeServer) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if req.GetVolumeId() == "" || target == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume id, target path and capability are required")
	}
	if err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	n.store.mu.Lock()
	var vol volumeRecord
	err := n.store.read("volumes", req.GetVolumeId(), &vol)
	n.store.mu.Unlock()
	if err != nil {
		return nil, notFoundOr(err, "volume", req.GetVolumeId())
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	mounted, err := isMountPoint(target)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if mounted { // published before: the same call again
		return &csi.NodePublishVolumeResponse{}, nil
	}
	source := n.store.dataDir("volumes", vol.ID)
	if err := syscall.Mount(source, target, "", syscall.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind mount %s on %s: %v", source, target, err)
	}
	n.published[target] = true
	flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_NOSUID | syscall.MS_NODEV)
	if req.GetReadonly() {
		flags |= syscall.MS_RDONLY
	}
	if err := syscall.Mount("", target, "", flags, ""); err != nil {
		_ = syscall.Unmount(target, 0)
		delete(n.published, target)
		return nil, status.Errorf(codes.Internal, "remount %s: %v", target, err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (n *nodeServer) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if req.GetVolumeId() == "" || target == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id and target path are required")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := unmount(target); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	delete(n.published, target)
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// unmountAll unmounts every target this process published that is still mounted (at stop).
func (n *nodeServer) unmountAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for target := range n.published {
		if err := unmount(target); err != nil {
			log.Printf("unmount %s: %v", target, err)
		}
		delete(n.published, target)
	}
}

// unmount removes every mount stacked on target; a target that is not mounted (or gone) is done.
func unmount(target string) error {
	for {
		mounted, err := isMountPoint(target)
		if err != nil || !mounted {
			return err
		}
		if err := syscall.Unmount(target, 0); err != nil {
			return err
		}
	}
}

// isMountPoint says whether path is a mount point in this mount namespace (/proc/self/mountinfo).
func isMountPoint(path string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) > 4 && unescapeMountPath(fields[4]) == path {
			return true, nil
		}
	}
	return false, scanner.Err()
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space, and the like).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
