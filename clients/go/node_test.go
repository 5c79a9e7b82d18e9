//go:build node

package holdfast

// The client against holdfast installed by its chart on the tier-3 node (a real kubelet):
// built with -tags node and run by tests/tests/it/node/go_client.rs, which installs the
// chart, opens and holds a TrainJob whose pod takes seconds to stop after SIGTERM, and sets
// the HOLDFAST_NODE_* variables once that pod is terminating. Plain `go test ./...` does not
// build it.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func nodeEnv(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: the tier-3 test node::go_client:: runs this on the node", name)
	}
	return v
}

// TestNodeAReleaseWhileTheHeldPodTerminatesIsPodsRemainAndNamesIt: the held execution's pod
// is terminating (HOLDFAST_NODE_PODS names that execution's pods). A Release is
// ErrPodsRemain, a *PodsRemainError naming that pod, terminating; the harness is told which
// pods were named (HOLDFAST_NODE_HANDSHAKE/pods-remain) and checks them at the apiserver
// before this goes on (HOLDFAST_NODE_HANDSHAKE/go-on). Then Retry, each try with a new
// deadline, succeeds (Released) only once the pod is gone, which the harness checks after.
func TestNodeAReleaseWhileTheHeldPodTerminatesIsPodsRemainAndNamesIt(t *testing.T) {
	base := nodeEnv(t, "HOLDFAST_NODE_URL")
	dial := nodeEnv(t, "HOLDFAST_NODE_DIAL")
	held := strings.Split(nodeEnv(t, "HOLDFAST_NODE_PODS"), ",")
	handshake := nodeEnv(t, "HOLDFAST_NODE_HANDSHAKE")
	instance, err := strconv.ParseUint(nodeEnv(t, "HOLDFAST_NODE_INSTANCE"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	job := TrainJob{Namespace: nodeEnv(t, "HOLDFAST_NODE_NAMESPACE"), Name: nodeEnv(t, "HOLDFAST_NODE_TRAINJOB")}

	// The URL names the controller's Service as a caller in the cluster does (the name its
	// certificate is for); from the host, connections to it go to a port forwarded to the
	// Service. The client's own transport (a clone of the default) keeps its rules.
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	var d net.Dialer
	http.DefaultTransport.(*http.Transport).DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == u.Host {
			addr = dial
		}
		return d.DialContext(ctx, network, addr)
	}
	c, err := New(Config{URL: base, Token: FileToken(nodeEnv(t, "HOLDFAST_NODE_TOKEN_FILE")), CA: FileCA(nodeEnv(t, "HOLDFAST_NODE_CA_FILE")), UserAgent: "holdfast-go-node"})
	if err != nil {
		t.Fatal(err)
	}
	m := CallMeta{Instance: instance}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	out, err := c.Release(ctx, job, m)
	cancel()
	var pr *PodsRemainError
	if !errors.Is(err, ErrPodsRemain) || !errors.As(err, &pr) {
		t.Fatalf("a Release while the held pod terminates: want ErrPodsRemain with its pods, got %+v, %v", out, err)
	}
	if errors.Is(err, ErrRejected) || errors.Is(err, ErrUnknown) || !Retryable(err) {
		t.Fatalf("ErrPodsRemain is a retryable class of its own: %v", err)
	}
	if len(pr.Pods) == 0 {
		t.Fatalf("the PodsRemain error names no pod: %v", err)
	}
	var named []string
	for _, p := range pr.Pods {
		if !slices.Contains(held, p.Name) || p.Why != WhyTerminating {
			t.Fatalf("pod %s: want a terminating pod of the held execution %v: %v", p, held, err)
		}
		if !strings.Contains(err.Error(), p.Name) {
			t.Fatalf("the error does not print pod %s: %v", p.Name, err)
		}
		named = append(named, p.Name)
	}
	t.Logf("the first Release: %v", err)
	// Written whole, then renamed: the harness reads it once it exists.
	part := filepath.Join(handshake, "pods-remain.part")
	if err := os.WriteFile(part, []byte(strings.Join(named, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(part, filepath.Join(handshake, "pods-remain")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, filepath.Join(handshake, "go-on"), time.Minute)

	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tries := 0
	out, err = Retry(ctx, 20*time.Second, time.Second, func(ctx context.Context) (Outcome, error) {
		tries++
		out, err := c.Release(ctx, job, m)
		if err != nil {
			t.Logf("try %d: %v", tries, err)
		}
		return out, err
	})
	if err != nil || out.Outcome != OutcomeOutcomeReleased {
		t.Fatalf("Retry of the Release: want Released once the pod is gone, got %+v, %v after %d tries", out, err, tries)
	}
	t.Logf("released after %d tries: %+v", tries, out)
}

// waitFor waits until path exists, at most within.
func waitFor(t *testing.T, path string, within time.Duration) {
	t.Helper()
	end := time.Now().Add(within)
	for time.Now().Before(end) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not appear within %v", path, within)
}
