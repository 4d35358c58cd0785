package rdmaread

import (
	"strings"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/rdmatoken"
)

// A read takes its share of the target streams: alone it is cut into
// parallel ranges, among many it is one GET of its whole range, which a
// server serves more cheaply than ranges of it.
func TestPartSizeSharesTheTargetStreams(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name          string
		target, cap   int64
		n, reading    int64
		wantPart      int64
		wantPartCount int64
	}{
		{"alone: Streams ranges", 8, 0, 256 * mib, 1, 64 * mib, 4},
		{"two reads: four each", 8, 0, 256 * mib, 2, 64 * mib, 4},
		{"four reads: two each", 8, 0, 256 * mib, 4, 128 * mib, 2},
		{"eight reads: one GET each", 8, 0, 256 * mib, 8, 256 * mib, 1},
		{"more reads than the target: still one", 8, 0, 768 * mib, 64, 768 * mib, 1},
		{"small read: never below minPart", 8, 0, 12 * mib, 1, 12 * mib, 1},
		{"odd size rounds up to whole MiB", 8, 0, 100*mib + 1, 1, 26 * mib, 4},
		{"PartSize caps the part", 8, 16 * mib, 256 * mib, 8, 16 * mib, 16},
		{"zero reading counts as one", 8, 0, 64 * mib, 0, 16 * mib, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Engine{cfg: testConfig(Config{Streams: 4, TargetStreams: int(tc.target), PartSize: tc.cap})}
			got := e.partSize(tc.n, tc.reading)
			if got != tc.wantPart {
				t.Fatalf("partSize(%d, %d) = %d, want %d", tc.n, tc.reading, got, tc.wantPart)
			}
			if parts := (tc.n + got - 1) / got; parts != tc.wantPartCount {
				t.Fatalf("%d parts, want %d", parts, tc.wantPartCount)
			}
		})
	}
}

// With the defaults a lone read takes the whole target as ranges: a single
// large read (a checkpoint's one cuFileRead) is not held to fewer streams
// than eight busy readers get together.
func TestLoneReadTakesTheTargetByDefault(t *testing.T) {
	e := &Engine{cfg: DefaultConfig()}
	const n = 8 << 30
	if got, want := (n+e.partSize(n, 1)-1)/e.partSize(n, 1), int64(e.cfg.TargetStreams); got != want {
		t.Fatalf("a lone %d-byte read in %d parts, want %d (the target streams)", n, got, want)
	}
}

// An RDMA read is cut as its HTTP parts are: among busy readers a whole
// object of up to MaxServerOp is one transfer, which a server answers more
// cheaply than ranges of it; --rdma-chunk only caps it.
func TestRDMATransfersFollowTheParts(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name       string
		chunk      int64
		n, reading int64
		want       int64 // transfers
	}{
		{"busy: a 768 MiB object is one transfer", 0, 768 * mib, 8, 1},
		{"busy: larger than MaxServerOp, cut at it", 0, 3 << 30, 8, 3},
		{"alone: the target streams' ranges", 0, 256 * mib, 1, 8},
		{"--rdma-chunk caps a busy reader's transfer", 256 * mib, 768 * mib, 8, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Engine{cfg: testConfig(Config{RDMAChunk: tc.chunk})}
			size := e.transferSize(tc.n, tc.reading)
			if size > rdmatoken.MaxServerOp {
				t.Fatalf("transfer of %d bytes, above MaxServerOp", size)
			}
			if got := (tc.n + size - 1) / size; got != tc.want {
				t.Fatalf("%d-byte read among %d: %d transfers of %d, want %d", tc.n, tc.reading, got, size, tc.want)
			}
		})
	}
}

// testConfig is cfg with DefaultConfig's value in each field cfg leaves 0,
// so that a test names only what it is about.
func testConfig(cfg Config) Config {
	d := DefaultConfig()
	or := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	or64 := func(v *int64, def int64) {
		if *v == 0 {
			*v = def
		}
	}
	or(&cfg.Streams, d.Streams)
	or(&cfg.TargetStreams, d.TargetStreams)
	or(&cfg.MaxOps, d.MaxOps)
	or64(&cfg.MaxBytes, d.MaxBytes)
	or64(&cfg.RDMAChunk, d.RDMAChunk)
	or(&cfg.Staging.SlotSize, d.Staging.SlotSize)
	or(&cfg.Staging.Slots, d.Staging.Slots)
	or(&cfg.Staging.Streams, d.Staging.Streams)
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = d.ReadTimeout
	}
	if cfg.Retries == 0 {
		cfg.Retries = d.Retries
	}
	return cfg
}

// A refused configuration names the field, and no flag; the defaults pass.
func TestConfigErrorsNameTheField(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Streams = 0 }, "Streams 0: "},
		{func(c *Config) { c.PartSize = 4096 }, "PartSize 4KiB: "},
		{func(c *Config) { c.RDMAChunk = 2 << 30 }, "RDMAChunk 2GiB: "},
		{func(c *Config) { c.Staging.SlotSize = 1024 }, "Staging.SlotSize 1KiB: "},
		{func(c *Config) { c.Staging.Streams = 65 }, "Staging.Streams 65: "},
		{func(c *Config) { c.Staging.Slots = 0 }, "Staging.Slots 0: "},
		{func(c *Config) { c.ReadTimeout = -time.Second }, "ReadTimeout -1s: "},
	} {
		cfg := DefaultConfig()
		c.mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "--") {
			t.Errorf("error %v, want one naming %q and no flag", err, c.want)
		}
	}
}
