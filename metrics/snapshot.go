package metrics

import (
	"sort"
	"strings"
)

// Snapshot returns the daemon's own series (s3gdsfs_*) as plain values for
// the stats extended attribute: a number for a series without labels, a
// map keyed by the joined label values otherwise. Histograms give their
// count and sum.
func (s *Set) Snapshot() (map[string]any, error) {
	families, err := s.Registry.Gather()
	if err != nil {
		return nil, err
	}
	out := make(map[string]any)
	for _, fam := range families {
		name := fam.GetName()
		if !strings.HasPrefix(name, "s3gdsfs_") {
			continue
		}
		name = strings.TrimPrefix(name, "s3gdsfs_")
		byLabel := map[string]float64{}
		for _, m := range fam.GetMetric() {
			var v float64
			switch {
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			case m.Histogram != nil:
				v = float64(m.Histogram.GetSampleCount())
			}
			labels := make([]string, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetValue())
			}
			if len(labels) == 0 {
				out[name] = v
				if m.Histogram != nil {
					out[name+"_sum"] = m.Histogram.GetSampleSum()
				}
				continue
			}
			byLabel[strings.Join(labels, ",")] = v
		}
		if len(byLabel) > 0 {
			keys := make([]string, 0, len(byLabel))
			for k := range byLabel {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			ordered := make(map[string]float64, len(keys))
			for _, k := range keys {
				ordered[k] = byLabel[k]
			}
			out[name] = ordered
		}
	}
	return out, nil
}

// Value reads one series from a Snapshot (name without the s3gdsfs_
// prefix): a series without labels as it is; one with labels at label, or
// summed over all its labels when label is "". A series never touched reads 0.
func (s *Set) Value(name, label string) (float64, error) {
	snap, err := s.Snapshot()
	if err != nil {
		return 0, err
	}
	switch v := snap[name].(type) {
	case float64:
		return v, nil
	case map[string]float64:
		if label != "" {
			return v[label], nil
		}
		sum := 0.0
		for _, x := range v {
			sum += x
		}
		return sum, nil
	}
	return 0, nil
}
