package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/mounttest"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/loopback"
)

// BenchmarkLoopbackRDMAOverhead measures what an RDMA read costs in the
// daemon beyond the fabric's own work: each call is one chunk, so the
// call's time (from the ioctl's result) minus the time the fabric spent
// serving that GET (its upstream GET and the write into the region) is
// the daemon's share: ioctl decode, import, token, scheduling, the signed
// request and the reply's classification.
//
//	go test -run '^$' -bench LoopbackRDMA ./integration
func BenchmarkLoopbackRDMAOverhead(b *testing.B) {
	for _, size := range []int64{1 << 20, 16 << 20} {
		b.Run(humanSize(size), func(b *testing.B) {
			srv := testenv.Start(b)
			srv.CreateBucket(b, "data")
			srv.PutRandomObject(b, "data", "obj", size, 5)
			loop := loopback.NewFabric()
			mp, dir, _ := gpuMount(b, srv, "data", func(c *daemon.Config) {
				c.GPU.RDMA = "loopback"
				// One transfer per call: one stream, so no parts by load.
				c.GPU.Streams = 1
			}, mounttest.Fabric(loop))
			f, err := os.Open(filepath.Join(mp, "obj"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			buf := hostBuffer(b, dir, "buf", int(size), 0)
			req := hostRequest(buf, 0, uint64(size), 0)
			if _, err := s3gds.Read(f, req); err != nil { // warm: import and registration
				b.Fatal(err)
			}
			before := loop.Stats()
			var calls time.Duration
			b.ResetTimer()
			for range b.N {
				res, err := s3gds.Read(f, hostRequest(buf, 0, uint64(size), 0))
				if err != nil || res.Transport != abi.TransportRDMA {
					b.Fatalf("%+v %v", res, err)
				}
				calls += res.Elapsed
			}
			b.StopTimer()
			after := loop.Stats()
			fabric := time.Duration(after.ServeNanos - before.ServeNanos)
			n := float64(b.N)
			b.ReportMetric(float64(calls.Microseconds())/n, "call-us/op")
			b.ReportMetric(float64(fabric.Microseconds())/n, "fabric-us/op")
			b.ReportMetric(float64((calls-fabric).Microseconds())/n, "daemon-us/op")
			b.SetBytes(size)
		})
	}
}

func humanSize(n int64) string {
	if n >= 1<<20 {
		return strconv.FormatInt(n>>20, 10) + "MiB"
	}
	return strconv.FormatInt(n>>10, 10) + "KiB"
}
