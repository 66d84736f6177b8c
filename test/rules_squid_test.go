package e2e

// [[rule]] against real Squid (issue 40): a rule matches the request as
// Squid's http_access does, whatever spelling the client chose, and
// credentials are asked for only by the rule that needs them, so an
// outsider learns nothing of passwords from a deny that comes first.

import (
	"testing"
)

// TestRuleSpellingsAgreeWithSquid: the same squid.conf in Squid and,
// imported, in peerd; every spelling of a denied URL, path or method is
// denied by both.
func TestRuleSpellingsAgreeWithSquid(t *testing.T) {
	t.Parallel()
	var reqs []judgeReq
	for _, target := range []string{
		"http://regex.example/secret", "http://REGEX.example/secret", "HTTP://regex.example/secret",
		"http://regex.example:80/secret", "http://regex.example/%73ecret", "http://Regex.Example:80/%73%65cret",
		"http://regex.example/public", "http://regex.example:8080/secret",
		"http://files.example/setup.exe", "http://files.example/setup%2Eexe", "http://files.example/setup.ex%65",
		"http://FILES.example/setup.exe", "http://files.example/setup.zip",
	} {
		reqs = append(reqs, judgeReq{"GET", target, "", ""})
	}
	for _, m := range []string{"PUT", "put", "Put", "POST", "get", "Get", "DELETE", "delete"} {
		reqs = append(reqs, judgeReq{m, "http://files.example/doc", "", ""})
	}
	judge(t, judgeCase{
		clients: []string{"127.0.0.1"},
		reqs:    reqs,
		hosts:   "regex.example files.example",
		conf: `acl secret url_regex ^http://regex\.example/secret
acl exe urlpath_regex \.exe$
acl writes method PUT DELETE
http_access deny secret
http_access deny exe
http_access deny writes
`,
	})
}

// TestAuthOrderAgreesWithSquid: "deny !localnet" before "allow authed":
// an outsider gets 403 with no, a wrong or the right password, as from
// Squid; an insider is challenged (407) until the password is right.
func TestAuthOrderAgreesWithSquid(t *testing.T) {
	t.Parallel()
	var reqs []judgeReq
	for _, auth := range []string{"", basicAuth("erin", "wrong"), basicAuth("erin", "s3cret-apr1"), basicAuth("nobody", "s3cret-apr1")} {
		reqs = append(reqs, judgeReq{"GET", "http://ok.test/x", auth, ""}, judgeReq{"CONNECT", "ok.test:443", auth, ""})
	}
	judge(t, judgeCase{
		clients: []string{"127.0.0.1", "127.0.0.2"},
		reqs:    reqs,
		files:   map[string]string{"users": usersAPR1 + "\n"},
		conf: `auth_param basic program /usr/lib/squid/basic_ncsa_auth %[3]s/users
acl localnet src 127.0.0.1
acl authed proxy_auth REQUIRED
http_access deny !localnet
http_access allow authed
`,
	})
}

// TestPeerAccessAgreesWithSquid: every peer's cache_peer_access list is
// evaluated as Squid evaluates it, together with never_direct: the shape
// an import used to turn into "p1 gets no requests" (p2 for a domain,
// p1 for the rest) and one that mixes client addresses and domains give
// each request the parent Squid gives it.
func TestPeerAccessAgreesWithSquid(t *testing.T) {
	t.Parallel()
	var reqs []judgeReq
	for _, host := range []string{"www.special.test", "special.test", "www.media.test", "ok.test", "other.test"} {
		reqs = append(reqs, judgeReq{"GET", "http://" + host + "/", "", ""}, judgeReq{"HEAD", "http://" + host + "/a", "", ""})
	}
	three := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	for _, jc := range []judgeCase{
		{name: "a domain to p2, the rest to p1", bothParents: true, routing: true, clients: three, reqs: reqs, conf: `cache_peer 127.0.0.1 parent %[1]s 0 no-query name=p1
cache_peer 127.0.0.1 parent %[2]s 0 no-query name=p2
acl special dstdomain .special.test
acl lo src 127.0.0.0/8
cache_peer_access p2 allow special
cache_peer_access p2 deny all
cache_peer_access p1 deny special
cache_peer_access p1 allow all
never_direct allow all
http_access allow lo
`},
		{name: "addresses and domains", bothParents: true, routing: true, clients: three, reqs: reqs, conf: `cache_peer 127.0.0.1 parent %[1]s 0 no-query name=pa
cache_peer 127.0.0.1 parent %[2]s 0 no-query name=pb
acl net2 src 127.0.0.2
acl media dstdomain .media.test .special.test
acl lo src 127.0.0.0/8
cache_peer_access pa deny net2 media
cache_peer_access pa allow all
cache_peer_access pb allow media
cache_peer_access pb allow net2
cache_peer_access pb deny all
never_direct allow all
http_access allow lo
`},
	} {
		t.Run(jc.name, func(t *testing.T) { judge(t, jc) })
	}
}
