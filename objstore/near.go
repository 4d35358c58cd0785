package objstore

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"time"
)

// NearEndpoint says whether endpoint's host is on this machine or on a
// private network: every address it resolves to is loopback, private
// (RFC 1918, IPv6 unique local) or link-local. One connection to such a
// store carries a reader's whole stream; the public internet gives each
// connection a share, so parallel ranged GETs read faster there. A name
// that does not resolve within two seconds counts as far.
func NearEndpoint(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil || u.Hostname() == "" {
		return false
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		return nearAddr(ip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return false
	}
	for _, a := range addrs {
		if !nearAddr(a) {
			return false
		}
	}
	return true
}

func nearAddr(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast()
}
