package httpapi

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ClientAddrs finds the address a request comes from. Forwarding headers
// (Forwarded, else X-Forwarded-For) are read only when the TCP peer is one
// of the trusted proxies, and then from the right: the first hop that is
// not itself a trusted proxy is the client. Anyone else's headers are
// ignored, since a limit keyed by them could be dodged by changing them.
type ClientAddrs struct {
	Trusted []netip.Prefix
}

// IP is the client's address (unmapped), or the zero Addr when RemoteAddr
// does not parse.
func (c ClientAddrs) IP(r *http.Request) netip.Addr {
	peer := parseHost(r.RemoteAddr)
	if !peer.IsValid() || !c.trusted(peer) {
		return peer
	}
	hops := forwardedFor(r.Header)
	for i := len(hops) - 1; i >= 0; i-- {
		a := parseHost(hops[i])
		if !a.IsValid() {
			// A garbled hop: what lies left of it cannot be trusted either.
			return peer
		}
		if !c.trusted(a) {
			return a
		}
		peer = a
	}
	return peer
}

// Key is the address failures are counted against: the client's IPv4
// address, or its IPv6 /64 (one subscriber's network: addresses within it
// are free to rotate).
func (c ClientAddrs) Key(r *http.Request) string {
	return AddrKey(c.IP(r), r.RemoteAddr)
}

// AddrKey groups an address: IPv4 as is, IPv6 by its /64. fallback is used
// when a is not valid.
func AddrKey(a netip.Addr, fallback string) string {
	if !a.IsValid() {
		return fallback
	}
	if a.Is6() {
		p, _ := a.WithZone("").Prefix(64)
		return p.String()
	}
	return a.String()
}

func (c ClientAddrs) trusted(a netip.Addr) bool {
	for _, p := range c.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHost parses "ip", "ip:port", "[ipv6]:port" or "[ipv6]".
func parseHost(s string) netip.Addr {
	s = strings.TrimSpace(s)
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// forwardedFor lists the hops of the Forwarded header's for= parameters
// (RFC 7239) or, without it, of X-Forwarded-For, leftmost first.
func forwardedFor(h http.Header) []string {
	if vals := h.Values("Forwarded"); len(vals) > 0 {
		var hops []string
		for _, v := range vals {
			for _, elem := range strings.Split(v, ",") {
				found := false
				for _, pair := range strings.Split(elem, ";") {
					k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
					if ok && strings.EqualFold(k, "for") {
						hops = append(hops, strings.Trim(val, `"`))
						found = true
					}
				}
				if !found {
					hops = append(hops, "") // a hop that hides itself: garbled
				}
			}
		}
		return hops
	}
	var hops []string
	for _, v := range h.Values("X-Forwarded-For") {
		for _, hop := range strings.Split(v, ",") {
			hops = append(hops, strings.TrimSpace(hop))
		}
	}
	return hops
}
