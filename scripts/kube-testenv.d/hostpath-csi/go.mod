// Build module for scripts/kube-testenv --csi: ironflow's own hostpath CSI driver (main.go), a
// stand-in for csi-driver-host-path and node-driver-registrar. Nothing here is imported by ironflow.
module ironflow.invalid/kube-testenv-hostpath-csi

go 1.26.0

require (
	github.com/container-storage-interface/spec v1.13.0
	google.golang.org/grpc v1.79.3
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af
	k8s.io/kubelet v0.36.3
)

require (
	golang.org/x/net v0.55.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
	golang.org/x/text v0.37.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260128011058-8636f8732409 // indirect
)
