package objstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// BenchmarkGETBodyReads compares three ways of reading whole-object GET
// bodies into a reused 4 MiB buffer, two at once, from versitygw on
// loopback, and reports the CPU each costs the reader and the server per GB:
//   - http: the GPU path's GET (GetRange through minio-go and net/http, the
//     stall guard's reads);
//   - raw: the body on a connection of its own (GetRaw), read as it comes;
//   - raw-lowat: the same, each wait for bytes lasting until 256 KiB (or what
//     the buffer still needs) are there (SO_RCVLOWAT), not the next packet.
//
// It measures a request shape, not code of the GPU path: raw-lowat exists
// only here.
func BenchmarkGETBodyReads(b *testing.B) {
	srv := testenv.StartInMemory(b)
	srv.CreateBucket(b, "bodies")
	const size, readers = 256 << 20, 2
	m := minioTestStore(b, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	ctx := context.Background()
	var versions [readers]Version
	for i := range readers {
		key := fmt.Sprintf("o%d", i)
		srv.PutRandomObject(b, "bodies", key, size, int64(i))
		obj, err := m.Stat(ctx, "bodies", key)
		if err != nil {
			b.Fatal(err)
		}
		versions[i] = obj.Version
	}
	for _, shape := range []struct {
		name  string
		lowat int
		read  func(m *Minio, key string, v Version, buf []byte, lowat int) error
	}{{"http", 0, readHTTPBody}, {"raw", 0, readRawBody}, {"raw-lowat", 256 << 10, readRawBody}} {
		b.Run(shape.name, func(b *testing.B) {
			bufs := make([][]byte, readers)
			for i := range bufs {
				bufs[i] = make([]byte, 4<<20)
			}
			testenv.BenchReadsAtOnce(b, readers, readers*size, srv.Pid(), "reader-cpu-s/GB", "server-cpu-s/GB", func(i int) error {
				return shape.read(m, fmt.Sprintf("o%d", i), versions[i], bufs[i], shape.lowat)
			})
		})
	}
}

func readHTTPBody(m *Minio, key string, v Version, buf []byte, _ int) error {
	ctx := context.Background()
	body, err := m.GetRange(ctx, "bodies", key, 0, v.Size, v)
	if err != nil {
		return err
	}
	defer body.Close()
	g := StallGuard{Timeout: time.Minute}
	g.Start(func() {})
	defer g.Stop()
	for left := v.Size; left > 0; left -= int64(len(buf)) {
		if err := g.ReadFull(ctx, body, buf[:min(int64(len(buf)), left)]); err != nil {
			return err
		}
	}
	return CheckEnd(body)
}

func readRawBody(m *Minio, key string, v Version, buf []byte, lowat int) error {
	body, err := m.GetRaw(context.Background(), "bodies", key, 0, v.Size, v)
	if err != nil {
		return err
	}
	defer body.Close()
	set := 1
	for body.Left() > 0 {
		p := buf[:min(int64(len(buf)), body.Left())]
		got := copy(p, body.head)
		body.head = body.head[got:]
		body.taken(got)
		for got < len(p) {
			if lw := max(min(lowat, len(p)-got), 1); lw != set {
				// Never more than this buffer still needs: those bytes come.
				body.rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, lw) })
				set = lw
			}
			k, err := body.conn.Read(p[got:])
			got += k
			body.taken(k)
			if err != nil && got < len(p) {
				return err
			}
		}
	}
	return nil
}
