package ledger

import (
	"net/url"
	"regexp"
	"strings"
)

var scpLike = regexp.MustCompile(`^(?:[A-Za-z0-9._-]+@)?([A-Za-z0-9.-]+):([^/].*)$`)

// NormalizeRepository turns a git remote URL into the repository name the
// ledger records and policies match: "host/owner/name", without scheme,
// user, port, trailing ".git" or slash. Accepted forms: https://, http://,
// ssh://, git:// URLs and scp-like "git@host:owner/name". Anything else (a
// local path, an already normalized name) is returned trimmed of a trailing
// slash and ".git".
//
// Examples: "git@github.com:ml-explore/mlx.git" and
// "https://github.com/ml-explore/mlx" both give "github.com/ml-explore/mlx".
func NormalizeRepository(remote string) string {
	s := strings.TrimSpace(remote)
	trim := func(p string) string {
		p = strings.TrimSuffix(strings.TrimSuffix(p, "/"), ".git")
		return strings.TrimSuffix(p, "/")
	}
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		switch u.Scheme {
		case "https", "http", "ssh", "git", "git+ssh":
			return trim(u.Hostname() + "/" + strings.TrimPrefix(u.Path, "/"))
		}
	}
	if !strings.Contains(s, "://") && !strings.HasPrefix(s, "/") && !strings.HasPrefix(s, ".") {
		if m := scpLike.FindStringSubmatch(s); m != nil {
			return trim(m[1] + "/" + m[2])
		}
	}
	return trim(s)
}
