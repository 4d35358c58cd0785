package cache

// Contains says whether key is cached, without counting a hit or a miss or
// refreshing its place in the LRU: prefetchers use it to skip blocks that
// are already in memory.
func (s *Store) Contains(key BlockKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Contains(key) || s.ahead.Contains(key)
}
