// Package cufilepreload holds libs3gdsfs_cufile.so, a C library that serves
// NVIDIA cuFile reads and writes of s3gdsfs files through the GPU read and
// write ioctls (docs/cufile-preload.md), and its tests: preload_test.go
// builds the library, a fake libcufile.so.0, a fake libcuda.so.1 and a
// cuFile program (testdata/) with gcc and runs the program through a real
// mount whose daemon uses the host stand-in for device memory; write_test.go
// writes through a second mount that takes writes.
package cufilepreload
