package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/client/go/s3gds"
	"github.com/s3gdsfs/s3gdsfs/daemon"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// BenchmarkGPURawGets reads two 256 MiB objects at once through the ioctl
// into host stand-in buffers, one GET per read, with GET bodies read through
// the HTTP client and on connections of their own (--gpu-raw-gets), and
// reports the CPU per GB of this process (the daemon, the readers and the
// stand-in's copies) and of the server.
func BenchmarkGPURawGets(b *testing.B) {
	srv := testenv.StartInMemory(b)
	srv.CreateBucket(b, "data")
	const size, readers = 256 << 20, 2
	for i := range readers {
		srv.PutRandomObject(b, "data", fmt.Sprintf("o%d", i), size, int64(i))
	}
	for _, raw := range []bool{false, true} {
		b.Run(fmt.Sprintf("raw=%v", raw), func(b *testing.B) {
			mp, dir, _ := gpuMount(b, srv, "data", func(c *daemon.Config) {
				c.GPU.TargetStreams = 1
				c.GPU.ClientGets = !raw
			})
			files := make([]*os.File, readers)
			bufs := make([]string, readers)
			for i := range readers {
				f, err := os.Open(filepath.Join(mp, fmt.Sprintf("o%d", i)))
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				files[i] = f
				bufs[i] = hostBuffer(b, dir, fmt.Sprintf("buf%d", i), size, 0)
			}
			testenv.BenchReadsAtOnce(b, readers, readers*size, srv.Pid(), "process-cpu-s/GB", "server-cpu-s/GB", func(i int) error {
				_, err := s3gds.Read(files[i], hostRequest(bufs[i], 0, size, 0))
				return err
			})
		})
	}
}
