package vfs

import (
	"context"
	"sync"
	"time"

	"github.com/s3gdsfs/s3gdsfs/cache"
	"github.com/s3gdsfs/s3gdsfs/objstore"
)

// object is one pinned version of one object, as the read path sees it.
type object struct {
	bucket, key string
	version     objstore.Version
	id          string // cache.BlockKey.Object: bucket, key and version
}

func newObject(e Entry) object {
	return object{bucket: e.Bucket, key: e.Key, version: e.Version,
		id: e.Bucket + "\x00" + e.Key + "\x00" + e.Version.ID()}
}

// pending is a block being downloaded. Readers that arrive meanwhile wait on
// done; the downloader hands each registered waiter its own reference.
type pending struct {
	done    chan struct{}
	blk     *cache.Block
	err     error
	waiters int
}

// fetcher downloads blocks into the shared store, one ranged GET per run of
// consecutive blocks or one whole-object stream (below) per sequential
// reader from the start, and makes concurrent readers of one block share
// one download. What to fetch ahead is the prefetcher's to say
// (prefetch.go).
type fetcher struct {
	f        *FS
	gets     *objstore.Getter // every GET of the read path: blocks, streams, splices
	mu       sync.Mutex
	inflight map[cache.BlockKey]*pending
}

func newFetcher(f *FS) *fetcher {
	get := &objstore.Getter{Store: f.store, ReadTimeout: f.cfg.ReadTimeout, Retries: f.cfg.Retries,
		OnRetry: f.m.ReadRetries.Inc,
		// The name now holds another version: the next lookup must ask
		// the store again.
		OnChanged: func(bucket, key string) {
			f.m.ChangedReads.Inc()
			f.Forget(bucket, key)
		}}
	return &fetcher{f: f, gets: get, inflight: make(map[cache.BlockKey]*pending)}
}

func (fe *fetcher) blockCount(o object) int64 {
	bs := int64(fe.f.cfg.BlockSize)
	return (o.version.Size + bs - 1) / bs
}

// get returns block idx of o with a reference for the caller, downloading it
// if nobody has it.
func (fe *fetcher) get(ctx context.Context, o object, idx int64) (*cache.Block, error) {
	key := cache.BlockKey{Object: o.id, Index: idx}
	if b, ok, err := fe.find(ctx, key); ok {
		fe.f.m.BlockCacheHits.Inc() // cached, or on its way: the prefetcher did its job
		return b, err
	}
	fe.f.m.BlockCacheMisses.Inc()

	// A demand read may wait for memory; prefetches never do.
	blk, err := fe.f.blocks.NewBlock(ctx, true)
	if err != nil {
		return nil, err
	}
	fe.mu.Lock()
	if p, ok := fe.inflight[key]; ok { // someone started it while we waited
		p.waiters++
		fe.mu.Unlock()
		blk.Release()
		return fe.wait(ctx, p)
	}
	if b := fe.f.blocks.Get(key); b != nil {
		fe.mu.Unlock()
		blk.Release()
		return b, nil
	}
	p := &pending{done: make(chan struct{}), waiters: 1}
	fe.inflight[key] = p
	fe.mu.Unlock()
	go fe.download(o, idx, []*cache.Block{blk}, []*pending{p}, nil)
	return fe.wait(ctx, p)
}

// find returns block key with a reference for the caller if it is cached
// or on its way (then once it is in); ok is false when it is neither.
func (fe *fetcher) find(ctx context.Context, key cache.BlockKey) (b *cache.Block, ok bool, err error) {
	if b := fe.f.blocks.Get(key); b != nil {
		return b, true, nil
	}
	fe.mu.Lock()
	p, ok := fe.inflight[key]
	if !ok {
		fe.mu.Unlock()
		return nil, false, nil
	}
	p.waiters++
	fe.mu.Unlock()
	b, err = fe.wait(ctx, p)
	return b, true, err
}

func (fe *fetcher) wait(ctx context.Context, p *pending) (*cache.Block, error) {
	select {
	case <-p.done:
		return p.blk, p.err
	case <-ctx.Done():
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	select {
	case <-p.done:
		// Finished as we gave up: we were handed a reference; give it back.
		if p.err == nil {
			p.blk.Release()
		}
	default:
		p.waiters--
	}
	return nil, ctx.Err()
}

// prefetch starts downloads of blocks [from, to) of o that nobody has, in
// runs of at most one part. It takes memory only if it is free at once, so
// prefetching never blocks a reader or exceeds the budget. It returns the
// block it stopped at: to, or the first block it left for later (memory
// was short, or another download took part of a run).
func (fe *fetcher) prefetch(o object, from, to int64) int64 {
	if n := fe.blockCount(o); to > n {
		to = n
	}
	partBlocks := fe.f.cfg.PartSize / int64(fe.f.cfg.BlockSize)
	for idx := from; idx < to; {
		run := fe.missingRun(o, idx, min(to, idx+partBlocks))
		if run == 0 {
			idx++
			continue
		}
		blks, pends, _ := fe.reserve(o, idx, run)
		if len(pends) > 0 {
			go fe.download(o, idx, blks, pends, nil)
		}
		if int64(len(pends)) < run {
			return idx + int64(len(pends))
		}
		idx += run
	}
	return to
}

// again sends block idx of o again after failed, a GET that did not bring
// it (a spliced GET's), counting that GET as its first attempt; the next
// read of the block waits for this download. Nothing is sent where the
// block is cached or on its way already, where memory is short (the read
// then fetches it on demand), or where failed is not worth a retry.
func (fe *fetcher) again(o object, idx int64, failed error) {
	if idx >= fe.blockCount(o) || !objstore.IsRetryable(failed) {
		return
	}
	if blks, pends, _ := fe.reserve(o, idx, 1); len(pends) > 0 {
		go fe.download(o, idx, blks, pends, failed)
	}
}

// reserve takes memory for up to n blocks from idx without waiting (so it
// never blocks a reader or exceeds the budget) and registers them as
// downloading, stopping where memory runs out or at the first block that
// is cached or downloading already (busy). It returns the blocks it took,
// each with its pending entry, for the caller to fill.
func (fe *fetcher) reserve(o object, idx, n int64) (blks []*cache.Block, pends []*pending, busy bool) {
	blks = make([]*cache.Block, 0, n)
	for range n {
		b, err := fe.f.blocks.NewBlock(context.Background(), false)
		if err != nil {
			break // memory is full: the reader reads on demand, or asks again
		}
		blks = append(blks, b)
	}
	pends = fe.register(o, idx, blks)
	for _, b := range blks[len(pends):] {
		b.Release()
	}
	return blks[:len(pends)], pends, len(pends) < len(blks)
}

// missingRun counts consecutive blocks from idx (below to) that are neither
// cached nor downloading.
func (fe *fetcher) missingRun(o object, idx, to int64) int64 {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	var n int64
	for i := idx; i < to; i++ {
		key := cache.BlockKey{Object: o.id, Index: i}
		if _, busy := fe.inflight[key]; busy || fe.f.blocks.Contains(key) {
			break
		}
		n++
	}
	return n
}

// register marks blocks from idx as downloading, stopping at the first one
// that appeared meanwhile.
func (fe *fetcher) register(o object, idx int64, blks []*cache.Block) []*pending {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	pends := make([]*pending, 0, len(blks))
	for i := range blks {
		key := cache.BlockKey{Object: o.id, Index: idx + int64(i)}
		if _, busy := fe.inflight[key]; busy || fe.f.blocks.Contains(key) {
			break
		}
		p := &pending{done: make(chan struct{})}
		fe.inflight[key] = p
		pends = append(pends, p)
	}
	return pends
}

// download fills blks (blocks first, first+1, ...) with one ranged GET,
// completing each block as soon as its bytes are in, and sends the rest of
// the range again after a transient failure (objstore.Getter.Fetch).
// failed is the error of an attempt already spent on these blocks (a
// stream's), or nil: it counts against --retries, so a read waits no
// longer than for ranged GETs alone.
func (fe *fetcher) download(o object, first int64, blks []*cache.Block, pends []*pending, failed error) {
	bs := int64(fe.f.cfg.BlockSize)
	off := first * bs
	end := min(off+int64(len(blks))*bs, o.version.Size)
	done := 0
	err := fe.gets.Fetch(context.Background(), objstore.Range{Bucket: o.bucket, Key: o.key, Off: off, N: end - off, Version: o.version},
		!fe.f.cfg.ClientGets, failed, func(body *objstore.Body, pos int64) (int64, error) {
			// pos is where a block starts: blocks are delivered whole.
			start := done
			for ; done < len(blks); done++ {
				b := blks[done]
				b.Data = b.Data[:min(bs, end-(off+int64(done)*bs))]
				if err := body.ReadFull(b.Data); err != nil {
					return int64(done-start) * bs, err
				}
				fe.complete(o, first+int64(done), b, pends[done], nil)
			}
			return end - pos, nil
		})
	if err != nil && done < len(blks) {
		fe.f.log.Warn("ranged GET failed", "bucket", o.bucket, "key", o.key,
			"offset", (first+int64(done))*bs, "err", err)
		for i := done; i < len(blks); i++ {
			fe.complete(o, first+int64(i), blks[i], pends[i], err)
		}
	}
}

// complete publishes a block (or its error) to its waiters and the store:
// as read if someone waits for it, as fetched ahead otherwise, so that the
// cache limit cannot drop it before its reader comes.
func (fe *fetcher) complete(o object, idx int64, b *cache.Block, p *pending, err error) {
	key := cache.BlockKey{Object: o.id, Index: idx}
	fe.mu.Lock()
	if err == nil {
		// Under fe.mu with the inflight entry still there, so that get
		// finds the block in one place or the other.
		if p.waiters > 0 {
			fe.f.blocks.Put(key, b)
		} else {
			fe.f.blocks.PutAhead(key, b)
		}
		for range p.waiters {
			b.Retain()
		}
		p.blk = b
	}
	p.err = err
	delete(fe.inflight, key)
	close(p.done)
	fe.mu.Unlock()
	b.Release() // the downloader's own reference
}

// A stream feeds a sequential reader from one GET.
//
// Where the mount uses streams (--stream: by default for stores on this
// host or a private network), a reader that starts at the beginning of an
// object gets the whole object from one request instead of a ranged GET per
// part: one request where ranges take dozens, less work per byte in the
// daemon, and servers serve a whole object more cheaply than ranges of it
// (versitygw sends a whole object with sendfile, a range through a buffer;
// docs/benchmarks.md, "Where the time goes").
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
