package abi

// Caps is the JSON value of the XattrCaps extended attribute: what this daemon
// can do, so a caller can choose flags before its first read.
type Caps struct {
	ABIVersion    int          `json:"abi_version"`
	CUDAAvailable bool         `json:"cuda_available"`
	CUDABackend   string       `json:"cuda_backend"` // one of the CUDABackend constants
	Devices       []CapsDevice `json:"devices"`
	RDMA          CapsRDMA     `json:"rdma"`
}

// CapsDevice is one CUDA device the daemon can write into.
type CapsDevice struct {
	Ordinal int    `json:"ordinal"`
	Name    string `json:"name"`
	// PCIBusID is the device's PCI address ("0000:1B:00.0"), by which a
	// process that numbers its devices otherwise (CUDA_VISIBLE_DEVICES, a
	// container given some of the GPUs) finds the daemon's ordinal for
	// its own; absent for the host stand-in.
	PCIBusID string `json:"pci_bus_id,omitempty"`
}

// CapsRDMA says how RDMA tokens are minted and which fabric carries the writes.
type CapsRDMA struct {
	Minter string `json:"minter"` // "none" or the minting library
	Fabric string `json:"fabric"` // "none", "loopback" (an in-process emulation), or the NIC fabric
}

// Values of Caps.CUDABackend.
const (
	CUDABackendCUDA        = "cuda"         // the CUDA driver: IPC handles name device memory
	CUDABackendHostStandin = "host-standin" // host buffers under /dev/shm stand in for devices (tests)
	CUDABackendNone        = "none"         // GPU reads fail with ENODEV
)
