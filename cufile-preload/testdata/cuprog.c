/*
 * cuprog.c - a program written against the cuFile API and the CUDA driver
 * API alone (it declares what it calls, as a program compiled with
 * cufile.h and cuda.h would see it), for the tests of libs3gdsfs_cufile.so.
 *
 *   cuprog read PATH OFF LEN BOFF OUT [reg] [async] [batch] [chunks=N] [threads=N] [alloc=N]
 *                                     [task=N] [odirect] [probe] [realloc=read|prime]
 *       reads [OFF, OFF+LEN) of PATH to BOFF of a fresh device allocation
 *       (BOFF+LEN+4096 bytes, or N) and writes the bytes read to OUT.
 *       chunks: that many reads, one after another (threads=N: at once, one
 *       thread each); task=N: reads of N bytes taken in turn by a pool of
 *       `threads` threads, as kvikio's pread splits a read; odirect: opened
 *       O_DIRECT, as kvikio opens; probe: cuFileGetVersion and
 *       cuFileDriverGetProperties first, printed; realloc: a read into the
 *       allocation first (prime: one the library refuses, running past its
 *       end), then the allocation freed and another made at the same
 *       address, which the read then goes to.
 *   cuprog write PATH OFF LEN BOFF SRC [reg] [async] [batch] [chunks=N] [threads=N] [alloc=N]
 *                                      [task=N] [odirect] [rdonly] [rdwr] [kvikio] [reverse] [again]
 *       writes the first LEN bytes of the local file SRC, put at BOFF of a
 *       fresh device allocation, at OFF of PATH, opened
 *       O_WRONLY|O_CREAT|O_TRUNC (rdonly: O_RDONLY; rdwr: O_RDWR), then closes PATH
 *       (close=, the upload's result). chunks, threads, task, reg, async
 *       (cuFileWriteAsync per chunk), batch and odirect as for read;
 *       kvikio: PATH opened as kvikio's FileHandle(PATH, "w") opens it, once
 *       without O_DIRECT and once with, the second registered; reverse: the
 *       later chunks' threads (batch: entries) first; again: the first
 *       chunk written once more afterwards (again_ret=, again_errno=).
 *   cuprog badhandle         cuFileRead with a handle never registered
 *   cuprog deregistered PATH cuFileRead after cuFileHandleDeregister
 *   cuprog badfd             cuFileHandleRegister of a closed descriptor
 *
 * It prints key=value lines: register=, ret=, errno=, guard=ok|bad.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *CUstream;
CUresult cuInit(unsigned flags);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);

typedef struct CUfileError { int err; CUresult cu_err; } CUfileError_t;
typedef struct CUfileDescr_t {
	int type; /* CU_FILE_HANDLE_TYPE_OPAQUE_FD */
	union { int fd; void *handle; } handle;
	const void *fs_ops;
} CUfileDescr_t;
typedef void *CUfileHandle_t;
typedef void *CUfileBatchHandle_t;
typedef struct CUfileIOParams {
	int mode; /* CUFILE_BATCH */
	union { struct { void *devPtr_base; off_t file_offset; off_t devPtr_offset; size_t size; } batch; } u;
	CUfileHandle_t fh;
	int opcode; /* CUFILE_READ */
	void *cookie;
} CUfileIOParams_t;
typedef struct CUfileIOEvents { void *cookie; int status; size_t ret; } CUfileIOEvents_t;

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

CUfileError_t cuFileDriverOpen(void);
CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *props);
CUfileError_t cuFileDriverClose_v2(void);
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
CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t *batch_idp, unsigned nr);
CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr, CUfileIOParams_t *iocbp, unsigned flags);
CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch_idp, unsigned min_nr, unsigned *nr,
				     CUfileIOEvents_t *iocbp, struct timespec *timeout);
void cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp);

#define FILL 0xEE

static int open_registered(const char *path, int flags, CUfileHandle_t *fh);

/* A pool's tasks: [at, at+task) of the read, taken in turn. */
struct pool {
	CUfileHandle_t fh;
	void *buf;
	size_t len, task;
	off_t off, boff;
	size_t next; /* the next task's start, taken atomically */
	ssize_t total;
	int failed;
	ssize_t ret;
	int err;
};

static void *run_pool(void *arg)
{
	struct pool *p = arg;
	for (;;) {
		size_t at = __atomic_fetch_add(&p->next, p->task, __ATOMIC_RELAXED);
		if (at >= p->len)
			return NULL;
		size_t n = p->len - at < p->task ? p->len - at : p->task;
		errno = 0;
		ssize_t r = cuFileRead(p->fh, p->buf, n, p->off + (off_t)at, p->boff + (off_t)at);
		int e = errno;
		if (r >= 0)
			__atomic_add_fetch(&p->total, r, __ATOMIC_RELAXED);
		if (r < 0 || (size_t)r != n) {
			/* A short task is only right at the end of the file; the
			 * caller compares the total. */
			if (r < 0 && __atomic_exchange_n(&p->failed, 1, __ATOMIC_RELAXED) == 0) {
				p->ret = r;
				p->err = e;
			}
		}
	}
}

static int open_registered(const char *path, int flags, CUfileHandle_t *fh)
{
	int fd = open(path, flags, 0644);
	if (fd < 0) {
		printf("open=%d\n", errno);
		exit(2);
	}
	CUfileDescr_t d;
	memset(&d, 0, sizeof(d));
	d.type = 1;
	d.handle.fd = fd;
	CUfileError_t e = cuFileHandleRegister(fh, &d);
	printf("register=%d\n", e.err);
	if (e.err != 0)
		exit(0);
	return fd;
}

struct job {
	CUfileHandle_t fh;
	void *buf;
	size_t len;
	off_t off, boff;
	ssize_t ret;
	int err;
};

static void *run_job(void *arg)
{
	struct job *j = arg;
	errno = 0;
	j->ret = cuFileRead(j->fh, j->buf, j->len, j->off, j->boff);
	j->err = errno;
	return NULL;
}

static int cmd_read(int argc, char **argv)
{
	if (argc < 7) {
		fprintf(stderr, "usage: cuprog read PATH OFF LEN BOFF OUT [reg] [async] [batch] [chunks=N] [threads=N]\n");
		return 2;
	}
	const char *path = argv[2];
	off_t off = strtoll(argv[3], NULL, 0);
	size_t len = strtoull(argv[4], NULL, 0);
	off_t boff = strtoll(argv[5], NULL, 0);
	const char *out = argv[6];
	bool reg = false, async = false, batch = false, odirect = false, probe = false;
	unsigned chunks = 1, threads = 0;
	size_t alloc = 0, task = 0;
	const char *realloc_mode = NULL;
	for (int i = 7; i < argc; i++) {
		if (!strcmp(argv[i], "reg"))
			reg = true;
		else if (!strcmp(argv[i], "async"))
			async = true;
		else if (!strcmp(argv[i], "batch"))
			batch = true;
		else if (!strncmp(argv[i], "chunks=", 7))
			chunks = strtoul(argv[i] + 7, NULL, 0);
		else if (!strncmp(argv[i], "threads=", 8))
			threads = strtoul(argv[i] + 8, NULL, 0);
		else if (!strncmp(argv[i], "alloc=", 6))
			alloc = strtoull(argv[i] + 6, NULL, 0);
		else if (!strncmp(argv[i], "task=", 5))
			task = strtoull(argv[i] + 5, NULL, 0);
		else if (!strcmp(argv[i], "odirect"))
			odirect = true;
		else if (!strcmp(argv[i], "probe"))
			probe = true;
		else if (!strncmp(argv[i], "realloc=", 8))
			realloc_mode = argv[i] + 8;
	}
	if (threads && !task)
		chunks = threads;
	if (chunks == 0)
		chunks = 1;

	cuInit(0);
	CUfileError_t e = cuFileDriverOpen();
	printf("driver_open=%d\n", e.err);
	if (probe) {
		int v = 0;
		e = cuFileGetVersion(&v);
		printf("version_err=%d\nversion=%d\n", e.err, v);
		CUfileDrvProps_t props;
		memset(&props, 0, sizeof(props));
		e = cuFileDriverGetProperties(&props);
		printf("props_err=%d\nnvfs_major=%u\nnvfs_minor=%u\nmax_direct_io_kb=%zu\nfflags=%u\nmax_batch_io_size=%u\n",
		       e.err, props.nvfs.major_version, props.nvfs.minor_version, props.nvfs.max_direct_io_size,
		       props.fflags, props.max_batch_io_size);
	}
	size_t bufsize = alloc ? alloc : (size_t)boff + len + 4096;
	CUdeviceptr dptr;
	if (cuMemAlloc_v2(&dptr, bufsize) != 0) {
		printf("alloc=failed\n");
		return 1;
	}
	unsigned char *host = (unsigned char *)(unsigned long)dptr; /* the fake's device memory is host-visible */
	memset(host, FILL, bufsize);
	void *buf = (void *)(unsigned long)dptr;
	if (reg) {
		e = cuFileBufRegister(buf, bufsize, 0);
		printf("bufregister=%d\n", e.err);
	}
	CUfileHandle_t fh;
	int fd = open_registered(path, O_RDONLY | (odirect ? O_DIRECT : 0), &fh);
	if (realloc_mode) {
		ssize_t r = !strcmp(realloc_mode, "prime") ? cuFileRead(fh, buf, bufsize + 1, 0, 0)
							   : cuFileRead(fh, buf, len, off, boff);
		printf("first=%zd\n", r);
		CUdeviceptr again;
		cuMemFree_v2(dptr);
		if (cuMemAlloc_v2(&again, bufsize) != 0) {
			printf("alloc=failed\n");
			return 1;
		}
		printf("same_addr=%d\n", again == dptr);
		dptr = again;
		host = (unsigned char *)(unsigned long)dptr;
		memset(host, FILL, bufsize);
		buf = (void *)(unsigned long)dptr;
	}

	size_t piece = (len + chunks - 1) / chunks;
	ssize_t total = 0;
	int err = 0;
	if (async) {
		size_t size = len;
		off_t foff = off, bo = boff;
		ssize_t got = 0;
		e = cuFileReadAsync(fh, buf, &size, &foff, &bo, &got, NULL);
		printf("async=%d\n", e.err);
		total = e.err == 0 ? got : -1;
	} else if (batch) {
		CUfileBatchHandle_t b;
		e = cuFileBatchIOSetUp(&b, chunks);
		printf("batch_setup=%d\n", e.err);
		CUfileIOParams_t *io = calloc(chunks, sizeof(*io));
		for (unsigned i = 0; i < chunks; i++) {
			size_t at = (size_t)i * piece;
			io[i].mode = 1;
			io[i].u.batch.devPtr_base = buf;
			io[i].u.batch.file_offset = off + (off_t)at;
			io[i].u.batch.devPtr_offset = boff + (off_t)at;
			io[i].u.batch.size = at < len ? (len - at < piece ? len - at : piece) : 0;
			io[i].fh = fh;
			io[i].opcode = 0;
			io[i].cookie = (void *)(unsigned long)(i + 1);
		}
		e = cuFileBatchIOSubmit(b, chunks, io, 0);
		printf("batch_submit=%d\n", e.err);
		unsigned seen = 0;
		CUfileIOEvents_t *ev = calloc(chunks, sizeof(*ev));
		for (int tries = 0; e.err == 0 && seen < chunks && tries < 1000; tries++) {
			unsigned nr = chunks - seen;
			struct timespec ts = {1, 0};
			e = cuFileBatchIOGetStatus(b, 1, &nr, ev, &ts);
			for (unsigned i = 0; i < nr; i++) {
				if (ev[i].status != 0x10) {
					printf("batch_status=%d\n", ev[i].status);
					total = -1;
				} else if (total >= 0) {
					total += (ssize_t)ev[i].ret;
				}
			}
			seen += nr;
		}
		printf("batch_events=%u\n", seen);
		cuFileBatchIODestroy(b);
	} else if (task) {
		struct pool p = {.fh = fh, .buf = buf, .len = len, .task = task, .off = off, .boff = boff};
		unsigned n = threads ? threads : 1;
		pthread_t *tids = calloc(n, sizeof(*tids));
		for (unsigned i = 0; i < n; i++)
			pthread_create(&tids[i], NULL, run_pool, &p);
		for (unsigned i = 0; i < n; i++)
			pthread_join(tids[i], NULL);
		total = p.failed ? p.ret : p.total;
		err = p.err;
	} else {
		struct job *jobs = calloc(chunks, sizeof(*jobs));
		pthread_t *tids = calloc(chunks, sizeof(*tids));
		for (unsigned i = 0; i < chunks; i++) {
			size_t at = (size_t)i * piece;
			jobs[i].fh = fh;
			jobs[i].buf = buf;
			jobs[i].len = at < len ? (len - at < piece ? len - at : piece) : 0;
			jobs[i].off = off + (off_t)at;
			jobs[i].boff = boff + (off_t)at;
			if (threads)
				pthread_create(&tids[i], NULL, run_job, &jobs[i]);
			else
				run_job(&jobs[i]);
		}
		/* The bytes read are the prefix up to the first short piece. */
		bool short_seen = false;
		for (unsigned i = 0; i < chunks; i++) {
			if (threads)
				pthread_join(tids[i], NULL);
			if (jobs[i].ret < 0) {
				if (total >= 0) {
					total = jobs[i].ret;
					err = jobs[i].err;
				}
			} else if (total >= 0 && !short_seen) {
				total += jobs[i].ret;
				if ((size_t)jobs[i].ret < jobs[i].len)
					short_seen = true;
			}
		}
	}
	printf("ret=%zd\n", total);
	printf("errno=%d\n", err);
	size_t got = total > 0 ? (size_t)total : 0;
	bool guard = true;
	for (size_t i = 0; i < (size_t)boff; i++)
		guard = guard && host[i] == FILL;
	for (size_t i = (size_t)boff + got; i < bufsize; i++)
		guard = guard && host[i] == FILL;
	printf("guard=%s\n", guard ? "ok" : "bad");
	FILE *f = fopen(out, "w");
	if (!f || fwrite(host + boff, 1, got, f) != got || fclose(f) != 0) {
		printf("out=failed\n");
		return 1;
	}
	cuFileHandleDeregister(fh);
	close(fd);
	if (reg) {
		e = cuFileBufDeregister(buf);
		printf("bufderegister=%d\n", e.err);
	}
	cuMemFree_v2(dptr);
	e = cuFileDriverClose_v2();
	printf("driver_close=%d\n", e.err);
	return 0;
}

/* A write pool's pieces, as struct pool's, written instead of read. */
static void *run_write_pool(void *arg)
{
	struct pool *p = arg;
	for (;;) {
		size_t at = __atomic_fetch_add(&p->next, p->task, __ATOMIC_RELAXED);
		if (at >= p->len)
			return NULL;
		size_t n = p->len - at < p->task ? p->len - at : p->task;
		errno = 0;
		ssize_t r = cuFileWrite(p->fh, p->buf, n, p->off + (off_t)at, p->boff + (off_t)at);
		int e = errno;
		if (r >= 0)
			__atomic_add_fetch(&p->total, r, __ATOMIC_RELAXED);
		if (r < 0 && __atomic_exchange_n(&p->failed, 1, __ATOMIC_RELAXED) == 0) {
			p->ret = r;
			p->err = e;
		}
	}
}

static void *run_write_job(void *arg)
{
	struct job *j = arg;
	errno = 0;
	j->ret = cuFileWrite(j->fh, j->buf, j->len, j->off, j->boff);
	j->err = errno;
	return NULL;
}

static int cmd_write(int argc, char **argv)
{
	if (argc < 7) {
		fprintf(stderr, "usage: cuprog write PATH OFF LEN BOFF SRC [options]\n");
		return 2;
	}
	const char *path = argv[2];
	off_t off = strtoll(argv[3], NULL, 0);
	size_t len = strtoull(argv[4], NULL, 0);
	off_t boff = strtoll(argv[5], NULL, 0);
	const char *src = argv[6];
	bool reg = false, async = false, batch = false, odirect = false, rdonly = false, rdwr = false, kvikio = false,
	     reverse = false, again = false;
	unsigned chunks = 1, threads = 0;
	size_t alloc = 0, task = 0;
	for (int i = 7; i < argc; i++) {
		if (!strcmp(argv[i], "reg"))
			reg = true;
		else if (!strcmp(argv[i], "async"))
			async = true;
		else if (!strcmp(argv[i], "batch"))
			batch = true;
		else if (!strncmp(argv[i], "chunks=", 7))
			chunks = strtoul(argv[i] + 7, NULL, 0);
		else if (!strncmp(argv[i], "threads=", 8))
			threads = strtoul(argv[i] + 8, NULL, 0);
		else if (!strncmp(argv[i], "alloc=", 6))
			alloc = strtoull(argv[i] + 6, NULL, 0);
		else if (!strncmp(argv[i], "task=", 5))
			task = strtoull(argv[i] + 5, NULL, 0);
		else if (!strcmp(argv[i], "odirect"))
			odirect = true;
		else if (!strcmp(argv[i], "rdonly"))
			rdonly = true;
		else if (!strcmp(argv[i], "rdwr"))
			rdwr = true;
		else if (!strcmp(argv[i], "kvikio"))
			kvikio = true;
		else if (!strcmp(argv[i], "reverse"))
			reverse = true;
		else if (!strcmp(argv[i], "again"))
			again = true;
	}
	if (threads && !task)
		chunks = threads;
	if (chunks == 0)
		chunks = 1;

	cuInit(0);
	CUfileError_t e = cuFileDriverOpen();
	printf("driver_open=%d\n", e.err);
	size_t bufsize = alloc ? alloc : (size_t)boff + len + 4096;
	CUdeviceptr dptr;
	if (cuMemAlloc_v2(&dptr, bufsize) != 0) {
		printf("alloc=failed\n");
		return 1;
	}
	unsigned char *host = (unsigned char *)(unsigned long)dptr; /* the fake's device memory is host-visible */
	memset(host, FILL, bufsize);
	FILE *in = fopen(src, "r");
	size_t fits = (size_t)boff < bufsize ? bufsize - (size_t)boff : 0;
	size_t want = len < fits ? len : fits;
	if (!in || fread(host + boff, 1, want, in) != want) {
		printf("src=failed\n");
		return 1;
	}
	fclose(in);
	void *buf = (void *)(unsigned long)dptr;
	if (reg) {
		e = cuFileBufRegister(buf, bufsize, 0);
		printf("bufregister=%d\n", e.err);
	}
	int wflags = (rdwr ? O_RDWR : O_WRONLY) | O_CREAT | O_TRUNC | O_CLOEXEC;
	int other = -1; /* kvikio's descriptor without O_DIRECT */
	CUfileHandle_t fh;
	int fd;
	if (kvikio) {
		/* kvikio's FileHandle(path, "w"): the file opened once for POSIX
		 * I/O, then again with O_DIRECT for cuFile; a failure of the
		 * second sends it to its compatibility mode. */
		other = open(path, wflags, 0644);
		if (other < 0) {
			printf("open=%d\n", errno);
			return 0;
		}
		fd = open(path, wflags | O_DIRECT, 0644);
		printf("open_direct=%d\n", fd < 0 ? errno : 0);
		if (fd < 0)
			return 0;
		CUfileDescr_t d;
		memset(&d, 0, sizeof(d));
		d.type = 1;
		d.handle.fd = fd;
		e = cuFileHandleRegister(&fh, &d);
		printf("register=%d\n", e.err);
		if (e.err != 0)
			return 0;
	} else {
		fd = open_registered(path, rdonly ? O_RDONLY : wflags | (odirect ? O_DIRECT : 0), &fh);
	}

	size_t piece = (len + chunks - 1) / chunks;
	ssize_t total = 0;
	int err = 0;
	if (async) {
		/* cuFileWriteAsync of each chunk in turn. */
		for (unsigned i = 0; i < chunks && total >= 0; i++) {
			size_t at = (size_t)i * piece;
			size_t size = at < len ? (len - at < piece ? len - at : piece) : 0;
			off_t foff = off + (off_t)at, bo = boff + (off_t)at;
			ssize_t done = 0;
			errno = 0;
			e = cuFileWriteAsync(fh, buf, &size, &foff, &bo, &done, NULL);
			if (e.err != 0) {
				printf("async=%d\n", e.err);
				total = -1;
			} else if (done < 0) {
				total = done;
				err = errno;
			} else {
				total += done;
			}
		}
	} else if (batch) {
		CUfileBatchHandle_t b;
		e = cuFileBatchIOSetUp(&b, chunks);
		printf("batch_setup=%d\n", e.err);
		CUfileIOParams_t *io = calloc(chunks, sizeof(*io));
		for (unsigned k = 0; k < chunks; k++) {
			unsigned i = reverse ? chunks - 1 - k : k; /* reverse: the entries last chunk first */
			size_t at = (size_t)i * piece;
			io[k].mode = 1;
			io[k].u.batch.devPtr_base = buf;
			io[k].u.batch.file_offset = off + (off_t)at;
			io[k].u.batch.devPtr_offset = boff + (off_t)at;
			io[k].u.batch.size = at < len ? (len - at < piece ? len - at : piece) : 0;
			io[k].fh = fh;
			io[k].opcode = 1; /* CUFILE_WRITE */
			io[k].cookie = (void *)(unsigned long)(i + 1);
		}
		e = cuFileBatchIOSubmit(b, chunks, io, 0);
		printf("batch_submit=%d\n", e.err);
		unsigned seen = 0;
		CUfileIOEvents_t *ev = calloc(chunks, sizeof(*ev));
		for (int tries = 0; e.err == 0 && seen < chunks && tries < 1000; tries++) {
			unsigned nr = chunks - seen;
			struct timespec ts = {1, 0};
			e = cuFileBatchIOGetStatus(b, 1, &nr, ev, &ts);
			for (unsigned i = 0; i < nr; i++) {
				if (ev[i].status != 0x10) {
					printf("batch_status=%d\n", ev[i].status);
					total = -1;
				} else if (total >= 0) {
					total += (ssize_t)ev[i].ret;
				}
			}
			seen += nr;
		}
		printf("batch_events=%u\n", seen);
		cuFileBatchIODestroy(b);
	} else if (task) {
		struct pool p = {.fh = fh, .buf = buf, .len = len, .task = task, .off = off, .boff = boff};
		unsigned n = threads ? threads : 1;
		pthread_t *tids = calloc(n, sizeof(*tids));
		for (unsigned i = 0; i < n; i++)
			pthread_create(&tids[i], NULL, run_write_pool, &p);
		for (unsigned i = 0; i < n; i++)
			pthread_join(tids[i], NULL);
		total = p.failed ? p.ret : p.total;
		err = p.err;
	} else {
		struct job *jobs = calloc(chunks, sizeof(*jobs));
		pthread_t *tids = calloc(chunks, sizeof(*tids));
		for (unsigned i = 0; i < chunks; i++) {
			size_t at = (size_t)i * piece;
			jobs[i].fh = fh;
			jobs[i].buf = buf;
			jobs[i].len = at < len ? (len - at < piece ? len - at : piece) : 0;
			jobs[i].off = off + (off_t)at;
			jobs[i].boff = boff + (off_t)at;
		}
		/* reverse: the later chunks' threads first, the first chunk's a
		 * moment after, so that they reach the file ahead of their turn. */
		for (unsigned k = 0; k < chunks; k++) {
			unsigned i = reverse ? chunks - 1 - k : k;
			if (reverse && i == 0)
				nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
			if (threads)
				pthread_create(&tids[i], NULL, run_write_job, &jobs[i]);
			else
				run_write_job(&jobs[i]);
		}
		for (unsigned i = 0; i < chunks; i++) {
			if (threads)
				pthread_join(tids[i], NULL);
			if (jobs[i].ret < 0) {
				if (total >= 0) {
					total = jobs[i].ret;
					err = jobs[i].err;
				}
			} else if (total >= 0) {
				total += jobs[i].ret;
			}
		}
	}
	printf("ret=%zd\n", total);
	printf("errno=%d\n", err);
	if (again) {
		/* The first chunk once more: behind the bytes written. */
		errno = 0;
		ssize_t r = cuFileWrite(fh, buf, piece < len ? piece : len, off, boff);
		printf("again_ret=%zd\nagain_errno=%d\n", r, errno);
	}
	cuFileHandleDeregister(fh);
	if (reg) {
		e = cuFileBufDeregister(buf);
		printf("bufderegister=%d\n", e.err);
	}
	/* close(2) ends an upload and answers its result; kvikio closes its
	 * descriptor without O_DIRECT first. */
	if (other >= 0) {
		int rc = close(other);
		printf("close_other=%d\n", rc == 0 ? 0 : errno);
	}
	int rc = close(fd);
	printf("close=%d\n", rc == 0 ? 0 : errno);
	cuMemFree_v2(dptr);
	e = cuFileDriverClose_v2();
	printf("driver_close=%d\n", e.err);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc < 2)
		return 2;
	const char *cmd = argv[1];
	if (!strcmp(cmd, "read"))
		return cmd_read(argc, argv);
	if (!strcmp(cmd, "write"))
		return cmd_write(argc, argv);
	cuInit(0);
	if (!strcmp(cmd, "badhandle")) {
		char junk[64];
		CUdeviceptr dptr;
		cuMemAlloc_v2(&dptr, 4096);
		ssize_t r = cuFileRead((CUfileHandle_t)junk, (void *)(unsigned long)dptr, 16, 0, 0);
		printf("ret=%zd\n", r);
		return 0;
	}
	if (!strcmp(cmd, "deregistered") && argc > 2) {
		CUfileHandle_t fh;
		open_registered(argv[2], O_RDONLY, &fh);
		cuFileHandleDeregister(fh);
		CUdeviceptr dptr;
		cuMemAlloc_v2(&dptr, 4096);
		ssize_t r = cuFileRead(fh, (void *)(unsigned long)dptr, 16, 0, 0);
		printf("ret=%zd\n", r);
		return 0;
	}
	if (!strcmp(cmd, "badfd")) {
		int fd = open("/dev/null", O_RDONLY);
		close(fd);
		CUfileDescr_t d;
		memset(&d, 0, sizeof(d));
		d.type = 1;
		d.handle.fd = fd;
		CUfileHandle_t fh;
		CUfileError_t e = cuFileHandleRegister(&fh, &d);
		printf("register=%d\n", e.err);
		return 0;
	}
	fprintf(stderr, "cuprog: unknown command %s\n", cmd);
	return 2;
}
