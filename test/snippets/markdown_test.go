package snippets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBlocksMarkers(t *testing.T) {
	tests := map[string]struct {
		md      string
		wantErr string // a substring of the error, "" for none
	}{
		"whole file, no marker":  {md: "```go\npackage main\n```\n"},
		"excluded with a reason": {md: "<!-- snippet: not compiled: shell output -->\n```go\nx\n```\n"},
		"fragment with a frame":  {md: "<!-- snippet: fragment, compiled in:\nfunc f() {\n\t...\n}\n-->\n\n```go\nx := 1\n```\n"},
		"excluded without a reason": {
			md: "<!-- snippet: not compiled: -->\n```go\nx\n```\n", wantErr: "md:1: \"not compiled:\" needs a reason",
		},
		"frame without its placeholder": {
			md: "<!-- snippet: fragment, compiled in:\nfunc f() {}\n-->\n```go\nx\n```\n", wantErr: "md:1: the frame of a fragment has 0 lines",
		},
		"unknown marker": {
			md: "<!-- snippet: fragment of main -->\n```go\nx\n```\n", wantErr: "md:1: unknown snippet marker",
		},
		"marker with text before the block": {
			md: "<!-- snippet: not compiled: output -->\nsome text\n```go\nx\n```\n", wantErr: "md:1: snippet marker not right before a code block",
		},
		"unclosed block":               {md: "text\n```go\nx\n", wantErr: "md:2: the code block is not closed"},
		"shell block run in the clone": {md: "<!-- snippet: runs in the clone -->\n```sh\nmake help\n```\n"},
		"shell block not run":          {md: "<!-- snippet: not run: takes an hour -->\n```sh\nmake chaos\n```\n"},
		"shell block not run without a reason": {
			md: "<!-- snippet: not run: -->\n```sh\nmake chaos\n```\n", wantErr: "md:1: \"not run:\" needs a reason",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Blocks("md", tc.md)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Blocks: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Blocks: error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestSourceFragment: a fragment lands in its frame with //line directives to the Markdown lines, and
// imports what it uses as a package, not what it declares itself.
func TestSourceFragment(t *testing.T) {
	md := strings.Join([]string{
		"<!-- snippet: fragment, compiled in:", // 1
		"func f(ctx context.Context) error {",  // 2
		"\t...",                                // 3
		"}",                                    // 4
		"-->",                                  // 5
		"```go",                                // 6
		"client := &http.Client{}",             // 7
		"_, err := client.Get(\"x\")",          // 8
		"return fmt.Errorf(\"%w\", err)",       // 9
		"```",
	}, "\n")
	blocks, err := Blocks("doc.md", md)
	if err != nil || len(blocks) != 1 {
		t.Fatalf("Blocks: %v, %d blocks", err, len(blocks))
	}
	src, err := Source(blocks[0], "/abs/doc.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"package snippet\n",
		"\tcontext \"context\"\n", "\tfmt \"fmt\"\n", "\thttp \"net/http\"\n",
		"//line /abs/doc.md:2:1\nfunc f(ctx context.Context) error {\n",
		"//line /abs/doc.md:7:1\nclient := &http.Client{}\n",
		"//line /abs/doc.md:4:1\n}\n",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("Source lacks %q:\n%s", want, src)
		}
	}
	if strings.Contains(src, "controller-runtime") {
		t.Errorf("Source imports the package client although the fragment declares client itself:\n%s", src)
	}
}

// TestBrokenBlockNamesItsLine: a block that does not compile is reported at its Markdown line, with the
// compiler's message.
func TestBrokenBlockNamesItsLine(t *testing.T) {
	dir := consumerFor(t)
	md := "Text.\n\n<!-- snippet: fragment, compiled in:\nfunc f(ctx context.Context) {\n\t...\n}\n-->\n```go\n" +
		"e, err := elector.New(elector.Config{})\n_ = e\n```\n" // line 9: err is declared and not used
	blocks, err := Blocks("doc.md", md)
	if err != nil {
		t.Fatal(err)
	}
	src, err := Source(blocks[0], filepath.Join(dir, "doc.md"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "broken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken", "snippet.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, out, err := goCmd(dir, "list", "-export", "-f", "{{.ImportPath}}", "./broken")
	if err == nil {
		t.Fatalf("the broken block compiled:\n%s", src)
	}
	got := byPackage(out)["broken"]
	if want := "doc.md:9:4: declared and not used: err"; !strings.Contains(got, want) {
		t.Errorf("compiler messages for the broken block: %q, want one containing %q (all output: %s)", got, want, out)
	}
}
