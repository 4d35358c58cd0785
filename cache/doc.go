// Package cache holds the block memory, block cache and metadata cache of the
// daemon.
//
// All block memory (prefetch buffers and cached blocks) is counted by one
// Budget, so the daemon's memory stays bounded however many handles are open.
// A Store hands out fixed-size, reference-counted Blocks from that budget and
// keeps recently read ones in an LRU cache. MetaCache caches path lookups,
// including names that do not exist.
package cache
