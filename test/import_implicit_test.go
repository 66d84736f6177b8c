package e2e

// import-squid against real Squid (issue 64): Squid's implicit last
// http_access rule in every case (no line at all; a last deny), an absent
// and an empty header against a regex ACL that matches "", and access
// lines in included files (a glob, as Debian's conf.d) decide the same
// requests the same way in Squid and, imported, in peerd.

import (
	"testing"
)

func TestImportImplicitRulesAgreeWithSquid(t *testing.T) {
	t.Parallel()
	three := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	var gets []judgeReq
	for _, host := range []string{"ok.test", "www.blocked.test"} {
		gets = append(gets, judgeReq{"GET", "http://" + host + "/", "", ""}, judgeReq{"HEAD", "http://" + host + "/a", "", ""})
	}
	var headers []judgeReq
	for _, h := range []string{"", "User-Agent:\r\n", "User-Agent: curl/8\r\n", "Referer:\r\n", "Referer: http://ok.test/\r\n", "X-Team:\r\n", "X-Team: ops\r\n",
		"User-Agent: \r\nReferer: x\r\n"} {
		headers = append(headers, judgeReq{"GET", "http://ok.test/", "", h})
	}
	for _, jc := range []judgeCase{
		{name: "no http_access line", ownAccess: true, allRefused: true, clients: three, reqs: gets, conf: "acl lo src 127.0.0.0/8\n"},
		{name: "a last deny lets the rest in", ownAccess: true, clients: three, reqs: gets, conf: "acl net3 src 127.0.0.3\nacl bad dstdomain .blocked.test\nhttp_access deny bad\nhttp_access deny net3\n"},
		{name: "empty and absent headers", clients: three, reqs: headers, conf: `acl noagent browser ^$
acl noref referer_regex ^$
acl noteam req_header X-Team ^$
acl net2 src 127.0.0.2
acl net3 src 127.0.0.3
http_access deny noagent
http_access deny net2 noref
http_access deny net3 noteam
`},
		{name: "includes", clients: three, reqs: gets,
			files: map[string]string{"10-deny.inc": "acl bad dstdomain .blocked.test\nhttp_access deny bad\n", "20-net3.inc": "acl net3 src 127.0.0.3\nhttp_access deny net3\n"},
			conf:  "include %[3]s/*.inc\n"},
	} {
		t.Run(jc.name, func(t *testing.T) { judge(t, jc) })
	}
}
