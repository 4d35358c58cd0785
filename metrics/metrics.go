// Package metrics declares every Prometheus series the daemon exports, in one
// place, so docs/metrics.md can be checked against a single list.
package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/s3gdsfs/s3gdsfs/abi"
)

// Set holds the daemon's collectors. Each daemon (and each test mount) owns
// one, registered on its own registry, so parallel tests never share counters.
type Set struct {
	Registry *prometheus.Registry

	S3Requests      *prometheus.CounterVec   // op, status
	S3Seconds       *prometheus.HistogramVec // op
	S3BytesReceived prometheus.Counter

	PosixReadBytes   prometheus.Counter
	PosixReads       prometheus.Counter
	PosixReadSeconds prometheus.Histogram
	PosixReadErrors  *prometheus.CounterVec // errno

	BlockCacheHits   prometheus.Counter
	BlockCacheMisses prometheus.Counter
	MetaCacheHits    *prometheus.CounterVec // kind: positive, negative
	MetaCacheMisses  prometheus.Counter

	BytesInFlight prometheus.Gauge
	MemoryInUse   prometheus.GaugeFunc
	MemoryLimit   prometheus.Gauge
	CachedBytes   prometheus.GaugeFunc

	GPUReadBytes     *prometheus.CounterVec // transport
	GPUReads         *prometheus.CounterVec // transport
	GPUDeclined      *prometheus.CounterVec // reason
	GPUDeclinedBytes *prometheus.CounterVec // reason
	// GPU writes' declined RDMA parts, apart from reads' so that each
	// side's declined bytes stay a part of its own HTTP bytes.
	GPUWriteDeclined      *prometheus.CounterVec // reason
	GPUWriteDeclinedBytes *prometheus.CounterVec // reason
	GPUReadSeconds        *prometheus.HistogramVec
	GPUCopyWait           prometheus.Counter
	GPUFetchedBytes       prometheus.Counter
	GPUSharedBytes        prometheus.Counter
	GPUReadErrors         *prometheus.CounterVec // errno
	GPUImportsOpen        prometheus.GaugeFunc   // reads the function given to ReportImportsOpen
	GPUBytesInFlight      prometheus.Gauge
	GPUSchedWait          prometheus.Histogram

	SkippedKeys  *prometheus.CounterVec // reason
	OpenHandles  prometheus.Gauge
	ReadRetries  prometheus.Counter
	ChangedReads prometheus.Counter
	// Writes (--allow-writes, vfs/upload.go): bytes accepted from writers,
	// uploads open, parts sent again, and uploads that ended how.
	WriteBytes        *prometheus.CounterVec // by path: posix, gpu_http, gpu_rdma
	UploadsInFlight   prometheus.Gauge
	UploadPartRetries prometheus.Counter
	UploadsDone       *prometheus.CounterVec // outcome: completed, aborted
	// ReadStreams counts whole-object GETs sent for sequential readers;
	// ReadStreamEnds says why each ended.
	ReadStreams    prometheus.Counter
	ReadStreamEnds *prometheus.CounterVec // end
	// BlocksKept counts blocks one reader had read that were kept for
	// another reader of the same object close behind it.
	BlocksKept prometheus.Counter
	// SpliceBytes counts bytes spliced from a GET's socket into /dev/fuse
	// (vfs/splice.go); SpliceEnds says how each spliced GET ended.
	SpliceBytes prometheus.Counter
	SpliceEnds  *prometheus.CounterVec // end
	// SpliceStreamGets counts ranged GETs spliced to a stream of reads
	// elsewhere in an object (vfs/splice.go, --splice-streams).
	SpliceStreamGets prometheus.Counter
	// SpliceCopied counts spliced bytes go-fuse could not splice on and
	// copied through the daemon instead.
	SpliceCopied prometheus.Counter
	// SpliceSmallBuffers counts spliced GETs' bytes copied into replies
	// because the socket brought them in buffers too small to splice.
	SpliceSmallBuffers prometheus.Counter
	// SpliceSocketWaits counts the times a spliced reply found the socket
	// short of its bytes and waited for them.
	SpliceSocketWaits prometheus.Counter
	// SpliceAhead counts bytes spliced into a feed's pipe ahead of their
	// read, once the reply before had been written (Config.SpliceAhead).
	SpliceAhead prometheus.Counter
	// SpliceReorderWaits counts page-cache reads that came ahead of a
	// whole-object GET's reader and waited for the reads before them.
	SpliceReorderWaits prometheus.Counter
	// SpliceAsideReads counts page-cache reads elsewhere than a
	// whole-object GET stands, served from the blocks while the GET waits
	// for its reader; SpliceSkippedBytes the GET's bytes passed over
	// unread where its reader stepped over pages it had.
	SpliceAsideReads   prometheus.Counter
	SpliceSkippedBytes prometheus.Counter

	// FuseRequests counts FUSE requests by how a daemon thread waited for
	// them (wait: polled, slept, blocked; --fuse-poll), read from the
	// function given to ReportFuseRequests.
	FuseRequests []prometheus.CounterFunc
	// FuseInterrupts counts the kernel's INTERRUPT requests (a signal to
	// a caller inside a request) by outcome: found their request, or came
	// before it was handled and were requeued.
	FuseInterrupts []prometheus.CounterFunc
	// FuseWokenBesidePollers counts daemon threads woken from ppoll by a
	// request while another thread polled /dev/fuse.
	FuseWokenBesidePollers prometheus.CounterFunc
	// FuseReadReplies and FuseReadReplySeconds count READ requests
	// answered and the time from go-fuse's call of the adapter's READ
	// handler to the end of its reply's write (fs/replies.go).
	FuseReadReplies, FuseReadReplySeconds prometheus.Counter

	importsOpen  atomic.Pointer[func() float64]
	fuseRequests atomic.Pointer[func() FuseRequestWaits]
}

// FuseRequestWaits is how many FUSE requests a daemon thread found while
// polling /dev/fuse, after sleeping in ppoll, or in a blocking read, how
// many INTERRUPT requests found their request or were requeued, and how
// many threads were woken from ppoll while another polled.
type FuseRequestWaits struct {
	Polled, Slept, Blocked              uint64
	InterruptsFound, InterruptsRequeued uint64
	WokenBesidePollers                  uint64
}

// ReportFuseRequests sets where s3gdsfs_fuse_requests_total is read at
// scrape time (the FUSE server); until then it reads 0.
func (s *Set) ReportFuseRequests(f func() FuseRequestWaits) { s.fuseRequests.Store(&f) }

// ReportImportsOpen sets where s3gdsfs_gpu_imports_open is read at scrape
// time (the GPU engine's import cache); until then it reads 0.
func (s *Set) ReportImportsOpen(f func() float64) { s.importsOpen.Store(&f) }

// New creates the collectors and registers them, with the Go runtime and
// process collectors, on a fresh registry. memoryInUse and cachedBytes are
// read at scrape time.
func New(memoryInUse, cachedBytes func() float64) *Set {
	r := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { r.MustRegister(c) }
	s := &Set{Registry: r}

	s.S3Requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3gdsfs_s3_requests_total", Help: "S3 requests by operation and outcome (HTTP status class or error kind).",
	}, []string{"op", "status"})
	s.S3Seconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "s3gdsfs_s3_request_seconds", Help: "S3 request latency to the first byte of the reply, by operation.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"op"})
	s.S3BytesReceived = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_s3_received_bytes_total", Help: "Object bytes received from S3 over HTTP (all paths).",
	})
	s.PosixReadBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_posix_read_bytes_total", Help: "Bytes returned to read(2) through the mount.",
	})
	s.PosixReads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_posix_reads_total", Help: "FUSE read requests served.",
	})
	s.PosixReadSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "s3gdsfs_posix_read_seconds", Help: "Time to serve one FUSE read request.",
		Buckets: prometheus.ExponentialBuckets(0.00001, 3, 14),
	})
	s.PosixReadErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3gdsfs_posix_read_errors_total", Help: "FUSE read requests that failed, by errno name.",
	}, []string{"errno"})
	s.BlockCacheHits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_block_cache_hits_total", Help: "Block reads served from memory (cached or already prefetched).",
	})
	s.BlockCacheMisses = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_block_cache_misses_total", Help: "Block reads that had to wait for S3.",
	})
	s.MetaCacheHits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3gdsfs_meta_cache_hits_total", Help: "Lookups answered from the metadata cache, by kind (positive, negative).",
	}, []string{"kind"})
	s.MetaCacheMisses = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_meta_cache_misses_total", Help: "Lookups that asked S3.",
	})
	s.BytesInFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "s3gdsfs_bytes_in_flight", Help: "Bytes requested from S3 and not yet received.",
	})
	s.MemoryInUse = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "s3gdsfs_block_memory_bytes", Help: "Block memory held (prefetch buffers and cache), within --memory-limit.",
	}, memoryInUse)
	s.MemoryLimit = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "s3gdsfs_block_memory_limit_bytes", Help: "The configured --memory-limit.",
	})
	s.CachedBytes = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "s3gdsfs_block_cache_bytes", Help: "Bytes held by the block cache, within --cache-size.",
	}, cachedBytes)
	s.SkippedKeys = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3gdsfs_skipped_keys_total", Help: "Keys not shown because they cannot be file names, by reason.",
	}, []string{"reason"})
	s.OpenHandles = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "s3gdsfs_open_handles", Help: "Open file handles.",
	})
	s.ReadRetries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_read_retries_total", Help: "Ranged GETs sent again after a transient failure.",
	})
	s.ChangedReads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_changed_object_reads_total", Help: "Reads refused because the object changed after it was opened.",
	})
	s.WriteBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3gdsfs_write_bytes_total", Help: "Bytes written to files of the mount (--allow-writes), by path: write(2), the GPU write ioctl through pinned staging (gpu_http), or its whole parts as RDMA UploadParts (gpu_rdma).",
	}, []string{"path"})
	s.UploadsInFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "s3gdsfs_uploads_in_flight", Help: "Files open for writing whose upload has not ended.",
	})
	s.UploadPartRetries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_upload_part_retries_total", Help: "Upload requests (parts, PUTs, completions, aborts) sent again after a transient failure.",
	})
	s.UploadsDone = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3gdsfs_uploads_total", Help: "Uploads ended, by outcome: completed (the object is visible) or aborted (nothing is).",
	}, []string{"outcome"})
	s.ReadStreams = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_read_streams_total", Help: "Whole-object GETs that fed a sequential reader instead of ranged GETs.",
	})
	s.ReadStreamEnds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3gdsfs_read_stream_ends_total", Help: "Whole-object streams ended, by why (done, overtaken, idle, slow, error); after slow or error ranged GETs take over.",
	}, []string{"end"})
	s.BlocksKept = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_blocks_kept_for_readers_total", Help: "Blocks a sequential reader had read that were kept for another reader of the same object close behind it, instead of leaving the cache.",
	})
	s.SpliceBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_splice_bytes_total", Help: "Bytes of direct-I/O reads spliced from a GET's socket (whole-object, or a stream's ranged one) into the kernel's reply, never copied through the daemon's memory (--splice).",
	})
	s.SpliceStreamGets = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_splice_stream_gets_total", Help: "Ranged GETs spliced to a stream of direct-I/O reads elsewhere in an object, one per stream and range (--splice-streams).",
	})
	s.SpliceEnds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3gdsfs_splice_ends_total", Help: "Spliced whole-object GETs ended, by why: done (the end of the object), left (the reader closed or read elsewhere), error (the GET failed; ordinary reads take over), refused (it could not start; ordinary reads serve).",
	}, []string{"end"})
	s.SpliceCopied = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_splice_copied_bytes_total", Help: "Bytes read from a spliced GET's pipe and copied into the reply because go-fuse could not splice them on (its pipes are too small: fs.pipe-max-size was below 2 MiB when the daemon started).",
	})
	s.SpliceSmallBuffers = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_splice_small_buffer_bytes_total", Help: "Bytes of spliced GETs copied into the reply because the socket brought them in buffers smaller than pages (packets of a 1500-byte frame network), more than one reply's pipe holds.",
	})
	s.SpliceSocketWaits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_splice_socket_waits_total", Help: "Times a spliced reply found its GET's socket short of the bytes it needed and waited for them (the server fell behind the reader).",
	})
	s.SpliceAhead = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_splice_ahead_bytes_total", Help: "Bytes of spliced GETs moved from the socket into a pipe ahead of their read, while the reply before was written or once it had been (mounts that poll for requests, --fuse-poll); the rest are moved when their read comes.",
	})
	s.SpliceReorderWaits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_splice_reorder_waits_total", Help: "Page-cache reads that reached the daemon ahead of the read before them (the kernel's readahead sends a few at once) and waited, briefly, for it, so that the whole-object spliced GET goes on.",
	})
	s.SpliceAsideReads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_splice_aside_reads_total", Help: "Page-cache reads elsewhere than a whole-object spliced GET stands (a mapping's reader touching each tensor before reading them in order), served from the blocks while the GET waits for its reader to come back.",
	})
	s.SpliceSkippedBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_splice_skipped_bytes_total", Help: "Bytes of whole-object spliced GETs passed over unread: the reader stepped over pages the page cache had (read aside, or before).",
	})
	s.GPUReadBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3gdsfs_gpu_read_bytes_total", Help: "Bytes delivered into device memory by GPU reads, by transport (rdma, http).",
	}, []string{"transport"})
	s.GPUReads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3gdsfs_gpu_reads_total", Help: "GPU read calls that delivered bytes, by transport (rdma, http).",
	}, []string{"transport"})
	s.GPUDeclined = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3gdsfs_gpu_declined_total", Help: "RDMA transfers asked for and not made, by reason; their bytes went over HTTP.",
	}, []string{"reason"})
	s.GPUDeclinedBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3gdsfs_gpu_declined_bytes_total", Help: "Bytes of declined RDMA transfers, by reason (a part of the HTTP bytes).",
	}, []string{"reason"})
	s.GPUWriteDeclined = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3gdsfs_gpu_write_declined_total", Help: "Whole parts of GPU writes asked for as RDMA UploadParts and not stored so, by reason; they went over HTTP (or failed the write, under rdma_only or decline_is_error).",
	}, []string{"reason"})
	s.GPUWriteDeclinedBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3gdsfs_gpu_write_declined_bytes_total", Help: "Bytes of declined RDMA parts of GPU writes that went over HTTP instead, by reason (a part of write_bytes_total{path=gpu_http}).",
	}, []string{"reason"})
	s.GPUReadSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "s3gdsfs_gpu_read_seconds", Help: "Time of one GPU read call, by transport.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
	}, []string{"transport"})
	s.GPUCopyWait = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_gpu_copy_wait_seconds_total", Help: "Time GPU reads spent blocked on device copies (slots and final sync).",
	})
	s.GPUFetchedBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_gpu_fetched_bytes_total", Help: "Bytes GPU reads over HTTP received from the server into pinned slots (a shared fetch counts once).",
	})
	s.GPUSharedBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_gpu_shared_bytes_total", Help: "Bytes GPU reads placed in device memory from a fetch another read led (single flight).",
	})
	s.GPUReadErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "s3gdsfs_gpu_read_errors_total", Help: "GPU read calls that failed, by errno name.",
	}, []string{"errno"})
	s.GPUImportsOpen = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "s3gdsfs_gpu_imports_open", Help: "CUDA IPC imports (caller buffers) held open.",
	}, func() float64 {
		if f := s.importsOpen.Load(); f != nil {
			return (*f)()
		}
		return 0
	})
	// fuseCounter reads one of the FUSE server's counters (get) at
	// scrape time; labels may be nil.
	fuseCounter := func(name, help string, labels prometheus.Labels, get func(FuseRequestWaits) float64) prometheus.CounterFunc {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, func() float64 {
			f := s.fuseRequests.Load()
			if f == nil {
				return 0
			}
			return get((*f)())
		})
	}
	const requestsHelp = "FUSE requests read by the daemon, by how the reading thread waited for them: found while polling /dev/fuse (polled), after sleeping in ppoll (slept), or in a blocking read (blocked, without --fuse-poll)."
	s.FuseRequests = []prometheus.CounterFunc{
		fuseCounter("s3gdsfs_fuse_requests_total", requestsHelp, prometheus.Labels{"wait": "polled"},
			func(w FuseRequestWaits) float64 { return float64(w.Polled) }),
		fuseCounter("s3gdsfs_fuse_requests_total", requestsHelp, prometheus.Labels{"wait": "slept"},
			func(w FuseRequestWaits) float64 { return float64(w.Slept) }),
		fuseCounter("s3gdsfs_fuse_requests_total", requestsHelp, prometheus.Labels{"wait": "blocked"},
			func(w FuseRequestWaits) float64 { return float64(w.Blocked) }),
	}
	const interruptsHelp = "INTERRUPT requests from the kernel (a signal to a caller inside a request), by outcome: found the request (cancelled only if the caller is being killed), or came before the request was handled and were answered EAGAIN, which the kernel sends again at once (requeued)."
	s.FuseInterrupts = []prometheus.CounterFunc{
		fuseCounter("s3gdsfs_fuse_interrupts_total", interruptsHelp, prometheus.Labels{"outcome": "found"},
			func(w FuseRequestWaits) float64 { return float64(w.InterruptsFound) }),
		fuseCounter("s3gdsfs_fuse_interrupts_total", interruptsHelp, prometheus.Labels{"outcome": "requeued"},
			func(w FuseRequestWaits) float64 { return float64(w.InterruptsRequeued) }),
	}
	s.FuseWokenBesidePollers = fuseCounter("s3gdsfs_fuse_wakeups_beside_pollers_total",
		"Daemon threads woken from ppoll by a FUSE request while another thread polled /dev/fuse (--fuse-poll): wake-ups not needed, each paid by the caller that sent the request inside its syscall.",
		nil, func(w FuseRequestWaits) float64 { return float64(w.WokenBesidePollers) })
	s.FuseReadReplies = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_fuse_read_replies_total", Help: "FUSE READ requests the daemon answered.",
	})
	s.FuseReadReplySeconds = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "s3gdsfs_fuse_read_reply_seconds_total",
		Help: "Time from go-fuse's call of the daemon's READ handler to the end of the reply's write, the copy of a spliced reply into the caller's memory included and what follows the write (a spliced reader's next reply filled ahead) not: the daemon's share of a read's time, less go-fuse's parsing of the request.",
	})
	s.GPUBytesInFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "s3gdsfs_gpu_bytes_in_flight", Help: "Bytes of GPU reads requested and not yet in device memory.",
	})
	s.GPUSchedWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "s3gdsfs_gpu_sched_wait_seconds", Help: "Time a GPU read's server operation waited for its turn.",
		Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12),
	})
	// Every series exists from the start, at zero, so a dashboard can tell
	// "no RDMA yet" from "not exported".
	for _, t := range []string{"rdma", "http"} {
		s.GPUReadBytes.WithLabelValues(t)
		s.GPUReads.WithLabelValues(t)
	}
	for _, o := range []string{"completed", "aborted"} {
		s.UploadsDone.WithLabelValues(o)
	}
	for d := abi.DeclineRegistrationFailed; d <= abi.DeclineRDMAUnavailable; d++ {
		s.GPUDeclined.WithLabelValues(d.String())
		s.GPUDeclinedBytes.WithLabelValues(d.String())
		s.GPUWriteDeclined.WithLabelValues(d.String())
		s.GPUWriteDeclinedBytes.WithLabelValues(d.String())
	}
	for _, p := range []string{"posix", "gpu_http", "gpu_rdma"} {
		s.WriteBytes.WithLabelValues(p)
	}
	for _, c := range []prometheus.Collector{
		s.GPUReadBytes, s.GPUReads, s.GPUDeclined, s.GPUDeclinedBytes, s.GPUWriteDeclined, s.GPUWriteDeclinedBytes, s.GPUReadSeconds,
		s.GPUCopyWait, s.GPUFetchedBytes, s.GPUSharedBytes, s.GPUReadErrors, s.GPUImportsOpen, s.GPUBytesInFlight, s.GPUSchedWait,
		s.S3Requests, s.S3Seconds, s.S3BytesReceived,
		s.PosixReadBytes, s.PosixReads, s.PosixReadSeconds, s.PosixReadErrors,
		s.BlockCacheHits, s.BlockCacheMisses, s.MetaCacheHits, s.MetaCacheMisses,
		s.BytesInFlight, s.MemoryInUse, s.MemoryLimit, s.CachedBytes,
		s.SkippedKeys, s.OpenHandles, s.ReadRetries, s.ChangedReads,
		s.WriteBytes, s.UploadsInFlight, s.UploadPartRetries, s.UploadsDone,
		s.ReadStreams, s.ReadStreamEnds, s.BlocksKept,
		s.SpliceBytes, s.SpliceEnds, s.SpliceStreamGets, s.SpliceCopied, s.SpliceSmallBuffers, s.SpliceSocketWaits, s.SpliceAhead, s.SpliceReorderWaits, s.SpliceAsideReads, s.SpliceSkippedBytes,
		s.FuseRequests[0], s.FuseRequests[1], s.FuseRequests[2], s.FuseInterrupts[0], s.FuseInterrupts[1], s.FuseWokenBesidePollers,
		s.FuseReadReplies, s.FuseReadReplySeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		f(c)
	}
	return s
}
