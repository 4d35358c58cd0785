package testenv

import (
	"sync"
	"testing"
)

// BenchReadsAtOnce is a benchmark's loop in which every iteration runs
// read(0) to read(n-1) at once and fails on the first error; bytes is what
// one iteration reads. After the loop it reports the CPU per GB that this
// process spent as selfUnit and the process pid (a server) as pidUnit.
func BenchReadsAtOnce(b *testing.B, n int, bytes int64, pid int, selfUnit, pidUnit string, read func(i int) error) {
	b.Helper()
	b.SetBytes(bytes)
	self0, pid0 := SelfCPUSeconds(), mustProcessCPU(b, pid)
	for b.Loop() {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = read(i)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	gb := float64(b.N) * float64(bytes) / 1e9
	b.ReportMetric((SelfCPUSeconds()-self0)/gb, selfUnit)
	b.ReportMetric((mustProcessCPU(b, pid)-pid0)/gb, pidUnit)
}

func mustProcessCPU(b *testing.B, pid int) float64 {
	b.Helper()
	t, err := ProcessCPUSeconds(pid)
	if err != nil {
		b.Fatal(err)
	}
	return t
}
