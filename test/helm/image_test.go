package helm_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// dockerfile is what the test needs from the Dockerfile's builder stage.
type dockerfile struct {
	args   map[string]string // ARG defaults
	copies []string          // COPY sources, relative to the build context
	build  string            // the RUN instruction that runs go build
	final  []string          // the final stage's instructions
}

// parseDockerfile reads the Dockerfile's builder stage (the first stage) and final stage.
func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if strings.HasSuffix(l, `\`) {
			cur.WriteString(strings.TrimSuffix(l, `\`) + " ")
			continue
		}
		cur.WriteString(l)
		if s := strings.TrimSpace(cur.String()); s != "" {
			lines = append(lines, s)
		}
		cur.Reset()
	}
	df := dockerfile{args: map[string]string{}}
	stage := 0
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			stage++
		case "ARG":
			name, def, _ := strings.Cut(rest, "=")
			df.args[name] = def
		case "COPY":
			if stage == 1 {
				f := strings.Fields(rest)
				df.copies = append(df.copies, f[:len(f)-1]...)
			}
		case "RUN":
			if stage == 1 && strings.Contains(rest, "go build") {
				df.build = rest
			}
		}
		if stage > 1 {
			df.final = append(df.final, l)
		}
	}
	if df.build == "" || len(df.copies) == 0 {
		t.Fatalf("the Dockerfile's first stage has no COPY or no RUN ... go build: %q", lines)
	}
	return df
}

// TestDockerfileBuild runs the Dockerfile's go build, exactly as written there, on a copy of exactly what the
// Dockerfile COPYs into its builder (so a package the image build cannot see fails here too), with the build
// arguments a release passes. There is no container engine on the dev and CI machines; `make docker-build`
// builds the real image. It then checks what the image's entrypoint is: a static, trimmed binary that runs as
// non-root and accepts every argument the Helm chart passes it.
func TestDockerfileBuild(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image is linux/amd64; the build is checked on linux")
	}
	df := parseDockerfile(t)
	for _, want := range []string{"USER 65532:65532", `ENTRYPOINT ["/manager"]`} {
		if !slices.Contains(df.final, want) {
			t.Errorf("the final stage lacks %q: %q", want, df.final)
		}
	}
	if !slices.ContainsFunc(df.final, func(s string) bool { return strings.HasPrefix(s, "FROM gcr.io/distroless/static") }) {
		t.Errorf("the final stage is not distroless static: %q", df.final)
	}

	ctx := t.TempDir()
	for _, src := range df.copies {
		cmd := exec.Command("cp", "-R", filepath.Join(root, filepath.Clean(src)), filepath.Join(ctx, filepath.Clean(src)))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("copying %s as the Dockerfile does: %v\n%s", src, err, out)
		}
	}
	buildArgs := map[string]string{}
	for k, v := range df.args {
		buildArgs[k] = v
	}
	buildArgs["VERSION"], buildArgs["COMMIT"] = "v9.8.7-test", "abc1234"
	build := regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)`).ReplaceAllStringFunc(df.build, func(m string) string {
		name := strings.Trim(m, "${}")
		v, ok := buildArgs[name]
		if !ok {
			t.Fatalf("the Dockerfile's build uses %s, which is not an ARG", m)
		}
		return v
	})
	t.Logf("running the Dockerfile's build: %s", build)
	cmd := exec.CommandContext(t.Context(), "sh", "-c", build)
	cmd.Dir = ctx
	// No network: the Dockerfile downloads modules in an earlier step; here they come from the module cache.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's go build failed: %v\n%s", err, out)
	}
	bin := filepath.Join(ctx, "manager")

	info, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, info)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath=true", "GOOS=linux", "GOARCH=amd64"} {
		if !strings.Contains(string(info), want) {
			t.Errorf("the binary's build info lacks %q:\n%s", want, info)
		}
	}
	// With -trimpath the build info omits -ldflags: look for the stamped values themselves.
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{buildArgs["VERSION"], buildArgs["COMMIT"]} {
		if !bytes.Contains(raw, []byte(want)) {
			t.Errorf("the VERSION/COMMIT build argument %q is not stamped into the binary", want)
		}
	}

	// The CLI is in the image too, for the token sidecar and for workloads that copy it into their image.
	fk := filepath.Join(ctx, "fencekit")
	for _, sub := range []string{"run", "elect"} {
		out, _ := exec.Command(fk, sub, "-h").CombinedOutput()
		if !strings.Contains(string(out), "-lease") {
			t.Errorf("the image's /fencekit %s -h does not show its flags:\n%s", sub, out)
		}
	}
	if !slices.Contains(df.final, "COPY --from=builder /workspace/manager /workspace/fencekit ./") {
		t.Errorf("the final stage does not copy both binaries: %q", df.final)
	}

	// Every argument the chart's Deployment passes, in every mode, is a flag of this binary.
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z0-9-]+)`).FindAllStringSubmatch(string(help), -1) {
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		t.Fatalf("no flags in the manager's --help:\n%s", help)
	}
	for _, values := range [][]string{nil, {"--set", "certManager.enabled=true"}} {
		for _, u := range objects(t, ns, values...).ofKind("Deployment") {
			for name := range args(t, as[appsv1.Deployment](t, u)) {
				if !flags[name] {
					t.Errorf("the chart passes --%s (values %v), which the manager does not define; it would crash on start", name, values)
				}
			}
		}
	}
}
