/*
 * fake_cuda.c - a stand-in for libcuda.so.1 in tests. A "device allocation"
 * is a file in $FAKE_CUDA_DIR (default /dev/shm) mapped shared, so a host
 * stand-in daemon (--gpu=host-standin --host-standin-dir the same dir) can
 * write into it; its IPC handle is the file's name, NUL-terminated in the
 * 64 bytes, as the stand-in expects. cuMemAlloc_v2 with $FAKE_CUDA_NO_IPC
 * set makes allocations without an IPC handle (like a memory pool's).
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

struct alloc { struct alloc *next; CUdeviceptr base; size_t size; char name[48]; int no_ipc; };
static struct alloc *allocs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned seq;

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
	pthread_mutex_unlock(&mu);
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir(), a->name);
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
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

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
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

CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
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

CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
	if (attr != 9 /* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */)
		return CUDA_ERROR_INVALID_VALUE;
	CUdeviceptr base;
	if (cuMemGetAddressRange_v2(&base, NULL, p) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_VALUE;
	*(int *)data = 0;
	return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(void *stream) { (void)stream; return CUDA_SUCCESS; }
