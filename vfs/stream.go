package vfs

import (
	"context"
	"sync"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cache"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// A stream feeds a sequential reader from one GET.
//
// Where the mount uses streams (--stream: by default for stores on this
// host or a private network), a reader that starts at the beginning of an
// object gets the whole object from one request instead of a ranged GET per
// part: one request where ranges take dozens, less work per byte in the
// daemon, and servers serve a whole object more cheaply than ranges of it
// (versitygw sends a whole object with sendfile, a range through a buffer;
// docs/benchmarks.md, "Where the time goes, and why the targets are not
// all held").
// The handle claims blocks for the stream as its window advances, as it
// would start ranged GETs for them: a claimed block is pending in the
// fetcher, so other readers wait on it like on any download, and the body is
// read no further than the window reaches (TCP holds the server back).
//
// A stream stops when its GET fails (the failure counts as the first of
// --retries), when once it has carried streamProbeParts parts it delivers
// less than StreamMinRate while reading, when the next block is already
// another reader's, and after StreamIdle with nothing claimed. What it had
// claimed goes to ranged GETs, and the handle uses ranged GETs from then on.
type stream struct {
	fe *fetcher
	o  object

	mu      sync.Mutex
	queue   []claim // claimed, not yet filled, in block order
	next    int64   // next block to claim
	started bool    // the GET has been sent
	closing bool    // claim no more; end once the queue is empty
	why     string  // why closing was set: the end's metric label
	wake    chan struct{}
}

// claim is one block a stream owns until its bytes are in.
type claim struct {
	idx int64
	blk *cache.Block
	p   *pending
}

// Why a stream ended: the values of s3gdsfs_read_stream_ends_total's label.
const (
	streamDone      = "done"      // the reader reached the end, closed or went elsewhere
	streamOvertaken = "overtaken" // the next block was another reader's
	streamIdle      = "idle"      // nothing claimed for StreamIdle
	streamSlow      = "slow"      // below StreamMinRate
	streamError     = "error"     // the GET failed
)

// streamProbeParts is how much a stream carries (in parts) before its rate
// is judged: enough that the request's first-byte time does not decide it.
const streamProbeParts = 8

func newStream(fe *fetcher, o object) *stream {
	return &stream{fe: fe, o: o, wake: make(chan struct{}, 1)}
}

// extend claims blocks up to (not including) block to, as far as memory
// allows without waiting, and sends the GET with the first claim. It
// returns the block claims reached and whether the stream still takes
// claims; once it does not, the caller fetches from there with ranged GETs.
func (s *stream) extend(to int64) (reached int64, open bool) {
	fe := s.fe
	partBlocks := fe.f.cfg.PartSize / int64(fe.f.cfg.BlockSize)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.signal()
	to = min(to, fe.blockCount(s.o))
	for s.next < to && !s.closing {
		want := min(to-s.next, partBlocks)
		blks, pends, busy := fe.reserve(s.o, s.next, want)
		for i, p := range pends {
			s.queue = append(s.queue, claim{idx: s.next + int64(i), blk: blks[i], p: p})
		}
		s.next += int64(len(pends))
		if busy {
			s.close(streamOvertaken)
		}
		if int64(len(pends)) < want {
			break // memory is full (the reader asks again later), or overtaken
		}
	}
	if s.next == fe.blockCount(s.o) {
		s.close(streamDone) // everything is claimed
	}
	if len(s.queue) > 0 && !s.started {
		s.started = true
		s.fe.f.m.ReadStreams.Inc()
		go s.run()
	}
	return s.next, !s.closing
}

// finish ends the stream once what it claimed is in: the reader closed the
// file or went elsewhere.
func (s *stream) finish() {
	s.mu.Lock()
	s.close(streamDone)
	s.mu.Unlock()
	s.signal()
}

// close stops claims; the first reason given is kept. Called with s.mu held.
func (s *stream) close(why string) {
	if !s.closing {
		s.closing, s.why = true, why
	}
}

func (s *stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run sends the GET and fills the claimed blocks in order as they come.
func (s *stream) run() {
	fe, cfg := s.fe, s.fe.f.cfg
	bs := int64(cfg.BlockSize)
	s.mu.Lock()
	first := s.queue[0].idx
	s.mu.Unlock()
	off := first * bs
	size := s.o.version.Size
	body, err := fe.gets.Open(context.Background(), objstore.Range{Bucket: s.o.bucket, Key: s.o.key,
		Off: off, N: size - off, Version: s.o.version}, false)
	if err != nil {
		s.stop(streamError, err)
		return
	}
	defer body.Close()
	probe := streamProbeParts * cfg.PartSize
	var carried int64
	var busy time.Duration
	for {
		c, ok := s.take()
		if !ok {
			return
		}
		want := min(bs, size-c.idx*bs)
		c.blk.Data = c.blk.Data[:want]
		start := time.Now()
		err := body.ReadFull(c.blk.Data) // the last block's read checks that the body ends there
		busy += time.Since(start)
		if err != nil {
			s.requeue(c)
			s.stop(streamError, err)
			return
		}
		fe.complete(s.o, c.idx, c.blk, c.p, nil)
		carried += want
		if cfg.StreamMinRate > 0 && carried >= probe && float64(carried) < float64(cfg.StreamMinRate)*busy.Seconds() {
			fe.f.log.Debug("whole-object stream slower than --stream-min-rate; ranged GETs take over",
				"bucket", s.o.bucket, "key", s.o.key, "bytes", carried, "reading", busy.Round(time.Millisecond),
				"mb_per_s", int(float64(carried)/busy.Seconds()/1e6))
			s.stop(streamSlow, nil)
			return
		}
	}
}

// take returns the next claim, waiting for one while the stream is open. It
// returns false when the stream is over: closed with nothing left, or idle
// for StreamIdle. Its wait is no stall: the reader is behind, not the
// server (the body's reads alone are watched).
func (s *stream) take() (claim, bool) {
	idle := time.NewTimer(s.fe.f.cfg.StreamIdle)
	defer idle.Stop()
	s.mu.Lock()
	for len(s.queue) == 0 {
		if s.closing {
			s.mu.Unlock()
			s.ended(s.why, nil)
			return claim{}, false
		}
		s.mu.Unlock()
		timedOut := false
		select {
		case <-s.wake:
		case <-idle.C:
			timedOut = true
		}
		s.mu.Lock()
		if timedOut && len(s.queue) == 0 {
			s.close(streamIdle)
		}
	}
	c := s.queue[0]
	s.queue = s.queue[1:]
	s.mu.Unlock()
	return c, true
}

// requeue puts back a claim whose bytes did not arrive.
func (s *stream) requeue(c claim) {
	s.mu.Lock()
	s.queue = append([]claim{c}, s.queue...)
	s.mu.Unlock()
}

// stop ends the stream early and hands what it had claimed to ranged GETs,
// one per part as the prefetcher sends them.
func (s *stream) stop(why string, err error) {
	s.mu.Lock()
	s.closing, s.why = true, why // this reason, not one set while the queue drained
	left := s.queue
	s.queue = nil
	s.mu.Unlock()
	fe := s.fe
	partBlocks := int(fe.f.cfg.PartSize / int64(fe.f.cfg.BlockSize))
	// The GET's failure was the first attempt for the block it was reading
	// (a slow stream failed nothing); the blocks behind it were not tried.
	failed := err
	for len(left) > 0 {
		run := left[:min(partBlocks, len(left))]
		left = left[len(run):]
		blks := make([]*cache.Block, len(run))
		pends := make([]*pending, len(run))
		for i, c := range run {
			blks[i], pends[i] = c.blk, c.p
		}
		go fe.download(s.o, run[0].idx, blks, pends, failed)
		failed = nil
	}
	s.ended(why, err)
}

func (s *stream) ended(why string, err error) {
	s.fe.f.m.ReadStreamEnds.WithLabelValues(why).Inc()
	if err != nil {
		s.fe.f.log.Debug("whole-object stream stopped; ranged GETs take over",
			"bucket", s.o.bucket, "key", s.o.key, "reason", why, "err", err)
	}
}
