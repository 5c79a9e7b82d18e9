// trainer-snapshot runs Kubeflow Trainer v2.3.0's own runtime-snapshot code — the reader
// and the writer of pkg/runtime/core/snapshot.go, reached by linkname since they are
// unexported — against a live apiserver, so that holdfast's tests check interoperability
// with the real thing rather than with a re-implementation.
//
//	trainer-snapshot -kubeconfig K -namespace NS -trainjob NAME read
//	    getRuntimeSnapshot: prints {"runtime": <the decoded runtime>} or {"error": "..."}
//	trainer-snapshot -kubeconfig K -namespace NS -trainjob NAME write
//	    reads the runtime as Trainer does (typed client Get) and calls createRuntimeSnapshot
//	    (server-side apply, field manager "trainer"); prints {} or {"error": "..."}
//
// A runtimeRef of a kind Trainer does not know is read into an Unstructured.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"
	_ "unsafe" // linkname

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	_ "github.com/kubeflow/trainer/v2/pkg/runtime/core"
)

//go:linkname getRuntimeSnapshot github.com/kubeflow/trainer/v2/pkg/runtime/core.getRuntimeSnapshot
func getRuntimeSnapshot(ctx context.Context, c client.Client, trainJob *trainer.TrainJob, runtimeObj client.Object) error

//go:linkname createRuntimeSnapshot github.com/kubeflow/trainer/v2/pkg/runtime/core.createRuntimeSnapshot
func createRuntimeSnapshot(ctx context.Context, c client.Client, trainJob *trainer.TrainJob, runtimeObj client.Object) error

func main() {
	// A flag set of our own: controller-runtime registers -kubeconfig on the global one.
	flags := flag.NewFlagSet("trainer-snapshot", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig to act as")
	namespace := flags.String("namespace", "", "the TrainJob's namespace")
	name := flags.String("trainjob", "", "the TrainJob's name")
	_ = flags.Parse(os.Args[1:])
	out := map[string]any{}
	if err := run(*kubeconfig, *namespace, *name, flags.Arg(0), out); err != nil {
		out["error"] = err.Error()
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace, name, mode string, out map[string]any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := trainer.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	var tj trainer.TrainJob
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &tj); err != nil {
		return fmt.Errorf("getting the TrainJob: %w", err)
	}
	group, kind := trainer.GroupVersion.Group, trainer.ClusterTrainingRuntimeKind
	if tj.Spec.RuntimeRef.APIGroup != nil {
		group = *tj.Spec.RuntimeRef.APIGroup
	}
	if tj.Spec.RuntimeRef.Kind != nil {
		kind = *tj.Spec.RuntimeRef.Kind
	}
	key := client.ObjectKey{Name: tj.Spec.RuntimeRef.Name}
	typed := group == trainer.GroupVersion.Group &&
		(kind == trainer.ClusterTrainingRuntimeKind || kind == trainer.TrainingRuntimeKind)
	newObject := func() client.Object {
		switch {
		case typed && kind == trainer.ClusterTrainingRuntimeKind:
			return &trainer.ClusterTrainingRuntime{}
		case typed:
			return &trainer.TrainingRuntime{}
		default:
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Kind: kind})
			return u
		}
	}
	if kind == trainer.TrainingRuntimeKind {
		key.Namespace = namespace
	}
	// The runtime as Trainer's reconciler reads it live: through the manager's informer
	// cache, whose reader sets the GroupVersionKind on typed objects (controller-runtime
	// CacheReader.Get). A direct client clears it, so set it as the cache does.
	getLive := func() (client.Object, error) {
		obj := newObject()
		if err := c.Get(ctx, key, obj); err != nil {
			return nil, fmt.Errorf("getting the runtime: %w", err)
		}
		obj.GetObjectKind().SetGroupVersionKind(trainer.GroupVersion.WithKind(kind))
		return obj, nil
	}
	switch mode {
	case "read":
		obj := newObject()
		if err := getRuntimeSnapshot(ctx, c, &tj, obj); err != nil {
			return err
		}
		out["runtime"] = obj
		// For comparison: the live runtime through the same typed decoding.
		if typed {
			if live, err := getLive(); err == nil {
				out["live"] = live
			} else {
				out["liveError"] = err.Error()
			}
		}
		return nil
	case "write":
		if !typed {
			return fmt.Errorf("write supports Trainer's own runtime kinds only")
		}
		obj, err := getLive()
		if err != nil {
			return err
		}
		return createRuntimeSnapshot(ctx, c, &tj, obj)
	default:
		return fmt.Errorf("mode %q: want read or write", mode)
	}
}
