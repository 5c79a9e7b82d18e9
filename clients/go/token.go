package holdfast

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"time"
)

// TokenSource gives the bearer token for a request.
type TokenSource interface {
	Token() (string, error)
}

// StaticToken is a token that never changes (a test's, a person's).
type StaticToken string

// Token returns the token.
func (t StaticToken) Token() (string, error) {
	if t == "" {
		return "", fmt.Errorf("holdfast: the token is empty")
	}
	return string(t), nil
}

// FileToken reads the token from a file and reads it again whenever the file changes: a
// projected ServiceAccount token, which the kubelet rewrites (by swapping a symlink) well
// before it expires. Mount one for the hold API's audience when the chart sets
// controller.tokenAudiences:
//
//	volumes:
//	- name: holdfast-token
//	  projected:
//	    sources:
//	    - serviceAccountToken: {path: token, audience: holdfast, expirationSeconds: 3600}
func FileToken(path string) TokenSource {
	return &fileToken{path: path}
}

type fileToken struct {
	path string
	mu   sync.Mutex
	// what was read last, and the file's identity then.
	token   string
	modTime time.Time
	size    int64
}

func (f *fileToken) Token() (string, error) {
	info, err := os.Stat(f.path) // follows the kubelet's symlink to the current file
	if err != nil {
		return "", fmt.Errorf("holdfast: token file: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.token != "" && info.ModTime().Equal(f.modTime) && info.Size() == f.size {
		return f.token, nil
	}
	raw, err := os.ReadFile(f.path)
	if err != nil {
		return "", fmt.Errorf("holdfast: token file: %w", err)
	}
	token := string(bytes.TrimSpace(raw))
	if token == "" {
		return "", fmt.Errorf("holdfast: token file %s is empty", f.path)
	}
	f.token, f.modTime, f.size = token, info.ModTime(), info.Size()
	return token, nil
}
