package forwarding

import (
	"path/filepath"
	"testing"
)

// TestLoggedURLStripsQueries: a URL is logged without its query by
// default (Squid's strip_query_terms), whole with it off.
func TestLoggedURLStripsQueries(t *testing.T) {
	al, err := OpenAccessLog(filepath.Join(t.TempDir(), "access.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	if got := string(logOf(al, nil, true).loggedURL([]byte("http://h/p?token=x"))); got != "http://h/p?" {
		t.Errorf("by default %q; want the query cut", got)
	}
	for _, tc := range []struct {
		strip     bool
		url, want string
	}{
		{true, "http://h/p?token=x&y=1", "http://h/p?"},
		{true, "http://h/p", "http://h/p"},
		{true, "h:443", "h:443"},
		{false, "http://h/p?token=x", "http://h/p?token=x"},
	} {
		if got := string(logOf(al, nil, tc.strip).loggedURL([]byte(tc.url))); got != tc.want {
			t.Errorf("strip %v: %q logged as %q; want %q", tc.strip, tc.url, got, tc.want)
		}
	}
}
