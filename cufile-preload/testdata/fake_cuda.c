/*
 * fake_cuda.c - a stand-in for libcuda.so.1 in tests. A "device allocation"
 * is a file in $FAKE_CUDA_DIR (default /dev/shm) mapped shared, so a host
 * stand-in daemon (--gpu=host-standin --host-standin-dir the same dir) can
 * write into it; its IPC handle is the file's name, NUL-terminated in the
 * 64 bytes, as the stand-in expects. cuMemAlloc_v2 with $FAKE_CUDA_NO_IPC
 * set makes allocations without an IPC handle (like a memory pool's).
 *
 * Each allocation has a buffer ID of its own, as the driver's
 * CU_POINTER_ATTRIBUTE_BUFFER_ID; $FAKE_CUDA_NO_BUFFER_ID makes
 * cuPointerGetAttributes refuse to give it. An allocation takes the place of
 * the last one freed when it fits there, so memory freed and allocated again
 * sits at the same address under a new handle, as the driver's often does.
 * At exit it prints on stderr how often the lookups a cuFile library makes
 * per read were called:
 *   fake_cuda calls: cuMemGetAddressRange_v2=N cuIpcGetMemHandle=N cuPointerGetAttribute=N cuPointerGetAttributes=N
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct { char reserved[64]; } CUipcMemHandle;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_SUPPORTED 801

struct alloc { struct alloc *next; CUdeviceptr base; size_t size; char name[48]; int no_ipc; unsigned long long id; };
static struct alloc *allocs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned seq;
static void *last_freed; /* where the last allocation freed was */
static size_t last_freed_size;

static unsigned long n_range, n_ipc, n_attr, n_attrs;

__attribute__((destructor)) static void report(void)
{
	fprintf(stderr, "fake_cuda calls: cuMemGetAddressRange_v2=%lu cuIpcGetMemHandle=%lu cuPointerGetAttribute=%lu cuPointerGetAttributes=%lu\n",
		__atomic_load_n(&n_range, __ATOMIC_RELAXED), __atomic_load_n(&n_ipc, __ATOMIC_RELAXED),
		__atomic_load_n(&n_attr, __ATOMIC_RELAXED), __atomic_load_n(&n_attrs, __ATOMIC_RELAXED));
}

static const char *dir(void)
{
	const char *d = getenv("FAKE_CUDA_DIR");
	return d && *d ? d : "/dev/shm";
}

CUresult cuInit(unsigned flags) { (void)flags; return CUDA_SUCCESS; }

CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t size)
{
	struct alloc *a = calloc(1, sizeof(*a));
	pthread_mutex_lock(&mu);
	snprintf(a->name, sizeof(a->name), "fakecuda-%d-%u", (int)getpid(), ++seq);
	a->id = 1000 + seq;
	void *hint = size <= last_freed_size ? last_freed : NULL;
	pthread_mutex_unlock(&mu);
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir(), a->name);
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	void *p = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->base = (CUdeviceptr)(unsigned long)p;
	a->size = size;
	a->no_ipc = getenv("FAKE_CUDA_NO_IPC") != NULL;
	pthread_mutex_lock(&mu);
	a->next = allocs;
	allocs = a;
	pthread_mutex_unlock(&mu);
	*out = a->base;
	return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p)
{
	pthread_mutex_lock(&mu);
	struct alloc **pp = &allocs;
	while (*pp && (*pp)->base != p)
		pp = &(*pp)->next;
	struct alloc *a = *pp;
	if (a)
		*pp = a->next;
	pthread_mutex_unlock(&mu);
	if (!a)
		return CUDA_ERROR_INVALID_VALUE;
	munmap((void *)(unsigned long)a->base, a->size);
	pthread_mutex_lock(&mu);
	last_freed = (void *)(unsigned long)a->base;
	last_freed_size = a->size;
	pthread_mutex_unlock(&mu);
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir(), a->name);
	unlink(path);
	free(a);
	return CUDA_SUCCESS;
}

static struct alloc *containing(CUdeviceptr p)
{
	for (struct alloc *a = allocs; a; a = a->next)
		if (p >= a->base && p - a->base < a->size)
			return a;
	return NULL;
}

static CUresult range(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	pthread_mutex_lock(&mu);
	struct alloc *a = containing(p);
	if (a) {
		if (base)
			*base = a->base;
		if (size)
			*size = a->size;
	}
	pthread_mutex_unlock(&mu);
	return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	__atomic_add_fetch(&n_range, 1, __ATOMIC_RELAXED);
	return range(base, size, p);
}

CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
	__atomic_add_fetch(&n_ipc, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&mu);
	struct alloc *a = containing(p);
	CUresult rc = CUDA_SUCCESS;
	if (!a || a->base != p)
		rc = CUDA_ERROR_INVALID_VALUE;
	else if (a->no_ipc)
		rc = CUDA_ERROR_NOT_SUPPORTED;
	else {
		memset(h, 0, sizeof(*h));
		memcpy(h->reserved, a->name, strlen(a->name) + 1);
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

#define ATTR_BUFFER_ID 7
#define ATTR_DEVICE_ORDINAL 9
#define ATTR_RANGE_START_ADDR 11
#define ATTR_RANGE_SIZE 12

static CUresult attribute(void *data, int attr, CUdeviceptr p)
{
	pthread_mutex_lock(&mu);
	struct alloc *a = containing(p);
	CUresult rc = CUDA_SUCCESS;
	if (!a)
		rc = CUDA_ERROR_INVALID_VALUE;
	else if (attr == ATTR_DEVICE_ORDINAL)
		*(int *)data = 0;
	else if (attr == ATTR_RANGE_START_ADDR)
		*(CUdeviceptr *)data = a->base;
	else if (attr == ATTR_RANGE_SIZE)
		*(size_t *)data = a->size;
	else if (attr == ATTR_BUFFER_ID && !getenv("FAKE_CUDA_NO_BUFFER_ID"))
		*(unsigned long long *)data = a->id;
	else
		rc = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&mu);
	return rc;
}

CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
	__atomic_add_fetch(&n_attr, 1, __ATOMIC_RELAXED);
	return attribute(data, attr, p);
}

/* As the driver's: a pointer that is no allocation gets zeros, not an
 * error. */
CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, CUdeviceptr p)
{
	__atomic_add_fetch(&n_attrs, 1, __ATOMIC_RELAXED);
	CUdeviceptr base;
	int known = range(&base, NULL, p) == CUDA_SUCCESS;
	for (unsigned i = 0; i < n; i++) {
		if (known) {
			CUresult rc = attribute(data[i], attrs[i], p);
			if (rc != CUDA_SUCCESS)
				return rc;
		} else if (attrs[i] == ATTR_DEVICE_ORDINAL) {
			*(int *)data[i] = -2;
		} else if (attrs[i] == ATTR_RANGE_START_ADDR || attrs[i] == ATTR_RANGE_SIZE || attrs[i] == ATTR_BUFFER_ID) {
			*(unsigned long long *)data[i] = 0;
		} else {
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(void *stream) { (void)stream; return CUDA_SUCCESS; }
