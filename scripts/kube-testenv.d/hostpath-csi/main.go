// Command hostpath-csi is ironflow's own small CSI driver for the real test node
// (ironflow.testing.realnode, RealNodeEnv(csi=True)): a stand-in written for ironflow, not the
// upstream csi-driver-host-path (the Go module proxy reachable here refuses that module and
// node-driver-registrar), sharing no code with either.
//
// One process serves, for the driver hostpath.csi.ironflow.io:
//   - the CSI socket: Identity, Controller (volumes, snapshots, clones) and Node (bind mounts);
//   - kubelet's plugin-registration socket in <kubelet root>/plugins_registry, so that no
//     node-driver-registrar is needed.
//
// Volumes are directories under --state-dir; a snapshot is a full copy of one (`cp -a`: bytes,
// modes, mtimes, symlinks, owners), and a volume made from a snapshot or cloned from a volume is a
// copy of that. Capacity is recorded, never enforced. It runs as root inside the node's mount
// namespace, where kubelet and containerd see its bind mounts; on SIGTERM it unmounts what it
// published and removes its sockets.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const driverName = "hostpath.csi.ironflow.io"

// version is set at build time (-X main.version=…).
var version = "dev"

func main() {
	endpoint := flag.String("csi-endpoint", "", "path of the CSI unix socket to serve")
	registry := flag.String("registration-dir", "", "kubelet's plugins_registry dir (its registration socket goes there)")
	stateDir := flag.String("state-dir", "", "where volumes and snapshots are kept, as directories")
	nodeID := flag.String("node-id", "", "this node's name (NodeGetInfo)")
	flag.Parse()
	if *endpoint == "" || *registry == "" || *stateDir == "" || *nodeID == "" {
		fmt.Fprintln(os.Stderr, "hostpath-csi: --csi-endpoint, --registration-dir, --state-dir and --node-id are required")
		os.Exit(2)
	}
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	if err := run(*endpoint, *registry, *stateDir, *nodeID); err != nil {
		log.Fatalf("hostpath-csi: %v", err)
	}
}

func run(endpoint, registry, stateDir, nodeID string) error {
	store, err := openStore(stateDir)
	if err != nil {
		return err
	}
	node := &nodeServer{nodeID: nodeID, store: store, published: map[string]bool{}}
	csiServer := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	csi.RegisterIdentityServer(csiServer, identityServer{})
	csi.RegisterControllerServer(csiServer, &controllerServer{store: store})
	csi.RegisterNodeServer(csiServer, node)
	csiListener, err := listen(endpoint)
	if err != nil {
		return err
	}
	regPath := filepath.Join(registry, driverName+"-reg.sock")
	regServer := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	registration.RegisterRegistrationServer(regServer, registrar{endpoint: endpoint})
	regListener, err := listen(regPath)
	if err != nil {
		return err
	}
	failed := make(chan error, 2)
	go func() { failed <- csiServer.Serve(csiListener) }()
	go func() { failed <- regServer.Serve(regListener) }()
	log.Printf("%s %s serving CSI on %s, registration on %s, state in %s", driverName, version, endpoint, regPath, stateDir)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	select {
	case sig := <-signals:
		log.Printf("%s: stopping", sig)
		err = nil
	case err = <-failed:
	}
	regServer.Stop() // kubelet deregisters the plugin once its socket is gone
	stopped := make(chan struct{})
	go func() { csiServer.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Second):
		csiServer.Stop()
	}
	node.unmountAll()
	_ = os.Remove(regPath)
	_ = os.Remove(endpoint)
	return err
}

// listen binds a unix socket at path, replacing a stale one from an earlier run.
func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", path)
}

// logCalls logs every call with its outcome: the log is what a failing test shows.
func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil {
		log.Printf("%s: %v", info.FullMethod, err)
	} else {
		log.Printf("%s: ok", info.FullMethod)
	}
	return resp, err
}

// registrar answers kubelet's plugin watcher, as node-driver-registrar would.
type registrar struct {
	registration.UnimplementedRegistrationServer
	endpoint string
}

func (r registrar) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	return &registration.PluginInfo{
		Type:              registration.CSIPlugin,
		Name:              driverName,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (registrar) NotifyRegistrationStatus(_ context.Context, s *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	if s.PluginRegistered {
		log.Printf("kubelet registered %s", driverName)
	} else {
		log.Printf("kubelet refused %s: %s", driverName, s.Error)
	}
	return &registration.RegistrationStatusResponse{}, nil
}

// identityServer: the plugin's name and that it has a controller service.
type identityServer struct {
	csi.UnimplementedIdentityServer
}

func (identityServer) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: driverName, VendorVersion: version}, nil
}

func (identityServer) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	service := &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
		{Type: &csi.PluginCapability_Service_{Service: service}},
	}}, nil
}

func (identityServer) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil // no Ready field: ready (the spec's default)
}
