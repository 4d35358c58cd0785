/*
 * cufile_abi.h - the parts of NVIDIA's cufile.h and cuda.h that
 * libs3gdsfs_cufile.so implements or calls, declared here so that the library
 * builds without the CUDA toolkit. Layouts and values follow cufile.h (GDS
 * 1.x, CUDA 12) on x86-64 and aarch64 Linux.
 */
#ifndef S3GDSFS_CUFILE_ABI_H
#define S3GDSFS_CUFILE_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

/* cuda.h */
typedef int CUresult; /* CUDA_SUCCESS 0 */
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *CUstream;
typedef struct CUipcMemHandle_st {
	char reserved[64];
} CUipcMemHandle;
#define CUDA_SUCCESS 0
#define CU_POINTER_ATTRIBUTE_BUFFER_ID 7 /* unsigned long long, unique per allocation in the process */
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define CU_POINTER_ATTRIBUTE_RANGE_SIZE 12

/* cufile.h */
#define CUFILEOP_BASE_ERR 5000
typedef enum CUfileOpError {
	CU_FILE_SUCCESS = 0,
	CU_FILE_DRIVER_NOT_INITIALIZED = 5001,
	CU_FILE_DRIVER_INVALID_PROPS = 5002,
	CU_FILE_DRIVER_UNSUPPORTED_LIMIT = 5003,
	CU_FILE_DRIVER_VERSION_MISMATCH = 5004,
	CU_FILE_DRIVER_VERSION_READ_ERROR = 5005,
	CU_FILE_DRIVER_CLOSING = 5006,
	CU_FILE_PLATFORM_NOT_SUPPORTED = 5007,
	CU_FILE_IO_NOT_SUPPORTED = 5008,
	CU_FILE_DEVICE_NOT_SUPPORTED = 5009,
	CU_FILE_NVFS_DRIVER_ERROR = 5010,
	CU_FILE_CUDA_DRIVER_ERROR = 5011,
	CU_FILE_CUDA_POINTER_INVALID = 5012,
	CU_FILE_CUDA_MEMORY_TYPE_INVALID = 5013,
	CU_FILE_CUDA_POINTER_RANGE_ERROR = 5014,
	CU_FILE_CUDA_CONTEXT_MISMATCH = 5015,
	CU_FILE_INVALID_MAPPING_SIZE = 5016,
	CU_FILE_INVALID_MAPPING_RANGE = 5017,
	CU_FILE_INVALID_FILE_TYPE = 5018,
	CU_FILE_INVALID_FILE_OPEN_FLAG = 5019,
	CU_FILE_DIO_NOT_SET = 5020,
	CU_FILE_INVALID_VALUE = 5022,
	CU_FILE_MEMORY_ALREADY_REGISTERED = 5023,
	CU_FILE_MEMORY_NOT_REGISTERED = 5024,
	CU_FILE_PERMISSION_DENIED = 5025,
	CU_FILE_DRIVER_ALREADY_OPEN = 5026,
	CU_FILE_HANDLE_NOT_REGISTERED = 5027,
	CU_FILE_HANDLE_ALREADY_REGISTERED = 5028,
	CU_FILE_DEVICE_NOT_FOUND = 5029,
	CU_FILE_INTERNAL_ERROR = 5030,
	CU_FILE_GETNEWFD_FAILED = 5031,
	CU_FILE_NVFS_SETUP_ERROR = 5033,
	CU_FILE_IO_DISABLED = 5034,
	CU_FILE_BATCH_SUBMIT_FAILED = 5035,
	CU_FILE_GPU_MEMORY_PINNING_FAILED = 5036,
	CU_FILE_BATCH_FULL = 5037,
	CU_FILE_ASYNC_NOT_SUPPORTED = 5038,
	CU_FILE_IO_MAX_ERROR = 5039,
} CUfileOpError;

typedef struct CUfileError {
	CUfileOpError err;
	CUresult cu_err;
} CUfileError_t;

typedef enum CUfileFileHandleType {
	CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1,
	CU_FILE_HANDLE_TYPE_OPAQUE_WIN32 = 2,
	CU_FILE_HANDLE_TYPE_USERSPACE_FS = 3,
} CUfileFileHandleType;

typedef struct CUfileDescr_t {
	CUfileFileHandleType type;
	union {
		int fd;
		void *handle;
	} handle;
	const void *fs_ops; /* const CUfileFSOps_t * */
} CUfileDescr_t;

typedef void *CUfileHandle_t;

enum { CU_FILE_USE_POLL_MODE = 0, CU_FILE_ALLOW_COMPAT_MODE = 1 };            /* bits of nvfs.dcontrolflags */
enum { CU_FILE_BATCH_IO_SUPPORTED = 1, CU_FILE_STREAMS_SUPPORTED = 2 };      /* bits of fflags */

typedef struct CUfileDrvProps {
	struct {
		unsigned int major_version;
		unsigned int minor_version;
		size_t poll_thresh_size;
		size_t max_direct_io_size;
		unsigned int dstatusflags;
		unsigned int dcontrolflags;
	} nvfs;
	unsigned int fflags;
	unsigned int max_device_cache_size;
	unsigned int per_buffer_cache_size;
	unsigned int max_device_pinned_mem_size;
	unsigned int max_batch_io_size;
	unsigned int max_batch_io_timeout_msecs;
} CUfileDrvProps_t;

/* batch API */
typedef void *CUfileBatchHandle_t;
typedef enum CUfileOpcode { CUFILE_READ = 0, CUFILE_WRITE = 1 } CUfileOpcode_t;
typedef enum CUFILEStatus_enum {
	CUFILE_WAITING = 0x1,
	CUFILE_PENDING = 0x2,
	CUFILE_INVALID = 0x4,
	CUFILE_CANCELED = 0x8,
	CUFILE_COMPLETE = 0x10,
	CUFILE_TIMEOUT = 0x20,
	CUFILE_FAILED = 0x40,
} CUfileStatus_t;
typedef enum cufileBatchMode { CUFILE_BATCH = 1 } CUfileBatchMode_t;
typedef struct CUfileIOParams {
	CUfileBatchMode_t mode;
	union {
		struct {
			void *devPtr_base;
			off_t file_offset;
			off_t devPtr_offset;
			size_t size;
		} batch;
	} u;
	CUfileHandle_t fh;
	CUfileOpcode_t opcode;
	void *cookie;
} CUfileIOParams_t;
typedef struct CUfileIOEvents {
	void *cookie;
	CUfileStatus_t status;
	size_t ret;
} CUfileIOEvents_t;

/* The calls, as cufile.h declares them. */
#ifdef __cplusplus
extern "C" {
#endif
CUfileError_t cuFileDriverOpen(void);
CUfileError_t cuFileDriverClose(void);
CUfileError_t cuFileDriverClose_v2(void);
long cuFileUseCount(void);
CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *props);
CUfileError_t cuFileDriverSetPollMode(bool poll, size_t poll_threshold_size);
CUfileError_t cuFileDriverSetMaxDirectIOSize(size_t max_direct_io_size);
CUfileError_t cuFileDriverSetMaxCacheSize(size_t max_cache_size);
CUfileError_t cuFileDriverSetMaxPinnedMemSize(size_t max_pinned_size);
CUfileError_t cuFileGetVersion(int *version);
CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr);
void cuFileHandleDeregister(CUfileHandle_t fh);
CUfileError_t cuFileBufRegister(const void *bufPtr_base, size_t length, int flags);
CUfileError_t cuFileBufDeregister(const void *bufPtr_base);
ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size, off_t file_offset, off_t bufPtr_offset);
ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size, off_t file_offset, off_t bufPtr_offset);
CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p, off_t *file_offset_p,
			      off_t *bufPtr_offset_p, ssize_t *bytes_read_p, CUstream stream);
CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p, off_t *file_offset_p,
			       off_t *bufPtr_offset_p, ssize_t *bytes_written_p, CUstream stream);
CUfileError_t cuFileStreamRegister(CUstream stream, unsigned flags);
CUfileError_t cuFileStreamDeregister(CUstream stream);
CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t *batch_idp, unsigned nr);
CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr, CUfileIOParams_t *iocbp, unsigned flags);
CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch_idp, unsigned min_nr, unsigned *nr,
				     CUfileIOEvents_t *iocbp, struct timespec *timeout);
CUfileError_t cuFileBatchIOCancel(CUfileBatchHandle_t batch_idp);
void cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp);
#ifdef __cplusplus
}
#endif

#endif /* S3GDSFS_CUFILE_ABI_H */
