// Command gen writes Go types for the schemas of the hold API's OpenAPI document
// (api/openapi.json), and a constant for each of its paths, so that a renamed field, enum
// value or route on the server's side breaks the client's build instead of its calls.
//
// It understands the subset of OpenAPI 3 (3.0 and 3.1) the document uses: objects with
// properties, $ref, arrays, maps (additionalProperties), string enums, nullable values (a
// type list with "null", oneOf with a null member, or nullable: true), allOf, and oneOf of
// objects that share a string discriminator (serde's internally tagged enums), which become
// one struct holding the discriminator and every variant's fields. Anything else is an
// error naming the schema, never a silent guess.
//
//	go run ./internal/cmd/gen -in ../../api/openapi.json -out types_gen.go
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/holdfast-dev/holdfast/clients/go/internal/openapigen"
)

func main() {
	in := flag.String("in", "../../api/openapi.json", "the OpenAPI document")
	out := flag.String("out", "types_gen.go", "the Go file to write")
	pkg := flag.String("package", "holdfast", "the Go package name")
	source := flag.String("source", "api/openapi.json", "the document's name in the header")
	flag.Parse()
	doc, err := os.ReadFile(*in)
	if err != nil {
		fail(err)
	}
	src, err := openapigen.Generate(doc, *pkg, *source)
	if err != nil {
		fail(fmt.Errorf("%s: %w", *in, err))
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gen:", err)
	os.Exit(1)
}
