package fleet

import (
	"testing"

	"github.com/peerd/peerd/internal/h1"
)

// TestOwnerHit: the owner's Cache-Status entry — the last one — decides
// FLEET_HIT; an earlier cache's hit (a parent's) does not.
func TestOwnerHit(t *testing.T) {
	for _, c := range []struct {
		field string
		hit   bool
	}{
		{"peerd-a; hit", true},
		{"peerd-a; hit; ttl=30", true},
		{"peerd-a; fwd=uri-miss; stored", false},
		{"squid; hit, peerd-a; fwd=uri-miss", false},
		{"peerd-p; fwd=miss, peerd-a;hit", true},
		{"", false},
		{"peerd-a; hitch", false},
	} {
		var r h1.Response
		head := "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
		if c.field != "" {
			head += "Cache-Status: " + c.field + "\r\n"
		}
		if err := h1.ParseResponse([]byte(head+"\r\n"), &r); err != nil {
			t.Fatal(err)
		}
		if got := ownerHit(&r); got != c.hit {
			t.Errorf("Cache-Status %q: hit %v; want %v", c.field, got, c.hit)
		}
	}
}
