package admin

import (
	"os"
	"strings"
	"testing"

	"github.com/gorilla/mux"
)

// TestAPIReferenceCoversEveryRoute: every route the API serves is in
// docs/admin-api.md as "METHOD /path", and the reference names no route
// the API does not serve.
func TestAPIReferenceCoversEveryRoute(t *testing.T) {
	api, _, _, _ := newAPI(t, "tok")
	b, err := os.ReadFile("../docs/admin-api.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	served := map[string]bool{}
	api.router.Walk(func(r *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		path, _ := r.GetPathTemplate()
		methods, _ := r.GetMethods()
		for _, m := range methods {
			served[m+" "+path] = true
			if !strings.Contains(doc, "### `"+m+" "+path) {
				t.Errorf("%s %s: not in docs/admin-api.md", m, path)
			}
		}
		return nil
	})
	for _, l := range strings.Split(doc, "\n") {
		if rest, ok := strings.CutPrefix(l, "### `"); ok {
			route, _, _ := strings.Cut(rest, "`")
			route, _, _ = strings.Cut(route, "?")
			if !served[route] {
				t.Errorf("docs/admin-api.md documents %q, which the API does not serve", route)
			}
		}
	}
}
