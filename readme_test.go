package leasehold_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readmeImports are what the README's Go blocks may use; each is kept in use,
// so that a block need not use them all.
var readmeImports = map[string]string{
	"context":         "context.Background",
	"database/sql":    "sql.ErrNoRows",
	"errors":          "errors.Is",
	"log":             "log.Print",
	"os":              "os.Exit",
	"os/signal":       "signal.NotifyContext",
	"path/filepath":   "filepath.Join",
	"testing":         "testing.Short",
	"syscall":         "syscall.SIGTERM",
	"go.uber.org/zap": "zap.NewNop",
	"github.com/leasehold/leasehold/election":           "election.Run",
	"github.com/leasehold/leasehold/fencing":            "fencing.ErrStaleToken",
	"github.com/leasehold/leasehold/fencing/sqlfence":   "sqlfence.New",
	"github.com/leasehold/leasehold/fencing/redisfence": "redisfence.New",
	"github.com/redis/go-redis/v9":                      "redis.NewClient",
	"github.com/leasehold/leasehold/guard":              "guard.Put",
	"clientv3 go.etcd.io/etcd/client/v3":                "clientv3.New",

	// "Testing your code": a fence's conformance test.
	"github.com/leasehold/leasehold/fencing/fencingtest": "fencingtest.FenceConformance",
}

// The README's Go code compiles against the packages as they are. A block
// that is a whole file stands as it is (a _test.go file is checked by
// fencingtest's own test); one of declarations gets a package clause and
// imports; one of statements runs in a function that returns an error and
// has ctx, db, hold and id to use.
func TestREADMECodeCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the README's code with the go command")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var imports, uses []string
	for path, use := range readmeImports {
		name, spec, ok := strings.Cut(path, " ")
		if !ok {
			spec = path
			name = ""
		}
		imports = append(imports, fmt.Sprintf("%s %q", name, spec))
		uses = append(uses, "var _ = "+use)
	}
	header := "package readme\n\nimport (\n" + strings.Join(imports, "\n") + "\n)\n\n" + strings.Join(uses, "\n") + "\n\n"
	dir := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	blocks := goBlocks(string(readme))
	for i, b := range blocks {
		var src string
		switch {
		case strings.HasPrefix(b, "package "):
			if strings.Contains(strings.SplitN(b, "\n", 2)[0], "_test") {
				continue
			}
			src = b
		case strings.HasPrefix(b, "func "):
			src = header + b
		default:
			src = header + "func _(ctx context.Context, db *sql.DB, hold *fencing.Hold, id int) error {\n" + b + "return nil\n}\n"
		}
		file := filepath.Join(dir, fmt.Sprintf("block%d.go", i))
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		pkg := fmt.Sprintf("internal/readmecheck/block%d", i)
		abs, err := filepath.Abs(filepath.Join(pkg, "block.go"))
		if err != nil {
			t.Fatal(err)
		}
		overlay[abs] = file
		pkgs = append(pkgs, "./"+pkg)
	}
	if len(pkgs) < 3 {
		t.Fatalf("found %d Go blocks to build in README.md; want its examples", len(pkgs))
	}
	o, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ofile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ofile, o, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"build", "-overlay", ofile}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README.md's Go code does not build (blocks numbered from 0, as they appear):\n%s", out)
	}
}

// goBlocks returns the bodies of README's ```go blocks, unindented.
func goBlocks(md string) []string {
	var out []string
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimLeft(lines[i], " ")
		if trimmed != "```go" {
			continue
		}
		indent := len(lines[i]) - len(trimmed)
		var b strings.Builder
		for i++; i < len(lines) && strings.TrimLeft(lines[i], " ") != "```"; i++ {
			b.WriteString(strings.TrimPrefix(lines[i], strings.Repeat(" ", indent)) + "\n")
		}
		out = append(out, b.String())
	}
	return out
}
