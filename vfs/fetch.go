package vfs

import (
	"context"
	"sync"

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
// consecutive blocks, and makes concurrent readers of one block share one
// download.
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
	if b := fe.f.blocks.Get(key); b != nil {
		fe.f.m.BlockCacheHits.Inc()
		return b, nil
	}
	fe.mu.Lock()
	p, ok := fe.inflight[key]
	if ok {
		p.waiters++
		fe.mu.Unlock()
		fe.f.m.BlockCacheHits.Inc() // already on its way: the prefetcher did its job
		return fe.wait(ctx, p)
	}
	fe.mu.Unlock()
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
	p = &pending{done: make(chan struct{}), waiters: 1}
	fe.inflight[key] = p
	fe.mu.Unlock()
	go fe.download(o, idx, []*cache.Block{blk}, []*pending{p}, nil)
	return fe.wait(ctx, p)
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
		false, failed, func(body *objstore.Body, pos int64) (int64, error) {
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
