package openapigen

import (
	"os"
	"strings"
	"testing"
)

func TestTheSubsetTheDocumentUsesBecomesGoTypes(t *testing.T) {
	doc := readSample(t)
	src, err := Generate(doc, "sample", "testdata/sample.json")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(strings.Fields(string(src)), " ")
	for _, want := range []string{
		"RouteHold = \"POST /v1/namespaces/{ns}/trainjobs/{name}/hold\"",
		"RejectCauseStaleHold RejectCause = \"StaleHold\"",
		"Cause *RejectCause `json:\"cause,omitempty\"`",
		"Instance *uint64 `json:\"instance,omitempty\"`",
		"OutcomeOutcomeReleased OutcomeOutcome = \"Released\"",
		"Resumed *bool `json:\"resumed,omitempty\"`",
		"ModePlain Mode = \"plain\"",
		"Hold *HoldStatus `json:\"hold,omitempty\"`",
		"RemainingPods []StatusRemainingPodsItem `json:\"remainingPods\"`",
		"Calls map[string]bool `json:\"calls,omitempty\"`",
		"CallBoundSeconds *float64",
		"Holder *string `json:\"holder,omitempty\"`",
		"type CallAnswer struct { Outcome Result CallAnswerResult `json:\"result\"` }",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, src)
		}
	}
}

func TestWhatTheGeneratorCannotReadIsAnErrorNamingTheSchema(t *testing.T) {
	doc := []byte(`{"openapi":"3.1.0","components":{"schemas":{"Odd":{"type":"object","properties":{"x":{"type":"tuple"}}}}}}`)
	_, err := Generate(doc, "x", "x")
	if err == nil || !strings.Contains(err.Error(), "Odd") {
		t.Fatalf("want an error naming Odd, got %v", err)
	}
	_, err = Generate([]byte(`{"openapi":"2.0"}`), "x", "x")
	if err == nil {
		t.Fatal("a Swagger 2 document was accepted")
	}
}

func readSample(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/sample.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}
