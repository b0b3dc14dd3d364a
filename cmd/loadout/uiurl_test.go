package main

import (
	"net"
	"testing"
)

// The start-up line's UI address is one a browser on this machine can
// open: a wildcard listener is reached at 127.0.0.1.
func TestUIURL_WildcardIsLoopback(t *testing.T) {
	for _, tt := range []struct {
		addr *net.TCPAddr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "http://127.0.0.1:8080/ui/"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "http://127.0.0.1:8080/ui/"},
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 80}, "http://10.1.2.3:80/ui/"},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 9}, "http://[::1]:9/ui/"},
	} {
		if got := uiURL(tt.addr, false); got != tt.want {
			t.Errorf("uiURL(%s) = %q, want %q", tt.addr, got, tt.want)
		}
	}
	if got, want := uiURL(&net.TCPAddr{IP: net.IPv4zero, Port: 8443}, true), "https://127.0.0.1:8443/ui/"; got != want {
		t.Errorf("uiURL over TLS = %q, want %q", got, want)
	}
}
