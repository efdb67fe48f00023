package snippets

import (
	"fmt"
	"slices"
	"strings"
)

// Block is one fenced code block of a Markdown file.
type Block struct {
	// File is the Markdown file, as given to Blocks.
	File string
	// Line is the line of the block's opening fence (1-based); its code starts on the next line.
	Line int
	// Lang is the first word of the fence's info string ("go", "sh", "" for none).
	Lang string
	// Code is the block's content, with the fence's indentation removed.
	Code string
	// Marker is the block's snippet marker, or nil if there is none.
	Marker *Marker
}

// Marker is a `<!-- snippet: ... -->` comment right before a code block.
type Marker struct {
	// Line is the line the comment starts on.
	Line int
	// Excluded is set for "not compiled: REASON", with the reason.
	Excluded string
	// Frame is set for "fragment, compiled in:": the Go declarations to compile the block in, one of whose
	// lines is "..."; FrameLine is the line of the Markdown file the frame's first line is on.
	Frame     string
	FrameLine int
	// Shell is set for a shell block (```sh): ShellInClone, ShellInModule, ShellNeedsCluster, or
	// ShellNotRun with NotRun the reason.
	Shell  string
	NotRun string
}

// How a shell block is run by TestShellBlocks.
const (
	// ShellInClone: run in a copy of this checkout, as a user runs it in a clone.
	ShellInClone = "runs in the clone"
	// ShellInModule: run in a new Go module beside that copy (../fencekit), as a user's module.
	ShellInModule = "runs in your module"
	// ShellNeedsCluster: not run here: it needs a cluster with fencekit installed.
	ShellNeedsCluster = "needs a cluster"
	// ShellNotRun: not run, for the reason given ("not run: REASON").
	ShellNotRun = "not run:"
)

const (
	markerPrefix = "snippet:"
	excluded     = "not compiled:"
	fragment     = "fragment, compiled in:"
	placeholder  = "..."
)

// Blocks returns the fenced code blocks of a Markdown file with their markers. A snippet marker that is
// malformed or does not stand right before a code block is an error naming its line.
func Blocks(file, src string) ([]Block, error) {
	lines := strings.Split(src, "\n")
	var blocks []Block
	used := map[int]bool{} // marker lines that belong to a block
	for i := 0; i < len(lines); i++ {
		indent, fence, info, ok := openingFence(lines[i])
		if !ok {
			continue
		}
		b := Block{File: file, Line: i + 1, Lang: firstWord(info)}
		var code []string
		j := i + 1
		for ; j < len(lines); j++ {
			if t := strings.TrimSpace(lines[j]); strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				break
			}
			code = append(code, strings.TrimPrefix(lines[j], indent))
		}
		if j == len(lines) {
			return nil, fmt.Errorf("%s:%d: the code block is not closed", file, b.Line)
		}
		b.Code = strings.Join(code, "\n") + "\n"
		m, err := markerBefore(file, lines, i)
		if err != nil {
			return nil, err
		}
		if m != nil {
			used[m.Line] = true
		}
		b.Marker = m
		blocks = append(blocks, b)
		i = j
	}
	// A marker that no block claimed is misplaced: it would silently check nothing.
	for i, l := range lines {
		if isMarkerStart(l) && !used[i+1] {
			return nil, fmt.Errorf("%s:%d: snippet marker not right before a code block (only blank lines may come between)", file, i+1)
		}
	}
	return blocks, nil
}

// openingFence reports whether line opens a fenced code block, with its indentation (a block in a list
// item is indented), its fence (``` or ~~~, three or more) and its info string.
func openingFence(line string) (indent, fence, info string, ok bool) {
	t := strings.TrimLeft(line, " ")
	indent = line[:len(line)-len(t)]
	for _, f := range []string{"```", "~~~"} {
		if strings.HasPrefix(t, f) {
			n := len(t) - len(strings.TrimLeft(t, f[:1]))
			return indent, t[:n], strings.TrimSpace(t[n:]), true
		}
	}
	return "", "", "", false
}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

func isMarkerStart(line string) bool {
	t := strings.TrimSpace(line)
	rest, ok := strings.CutPrefix(t, "<!--")
	return ok && strings.HasPrefix(strings.TrimSpace(rest), markerPrefix)
}

// markerBefore returns the snippet marker that ends on the last non-blank line before line fenceAt
// (0-based), if any.
func markerBefore(file string, lines []string, fenceAt int) (*Marker, error) {
	end := fenceAt - 1
	for end >= 0 && strings.TrimSpace(lines[end]) == "" {
		end--
	}
	if end < 0 || !strings.HasSuffix(strings.TrimSpace(lines[end]), "-->") {
		return nil, nil
	}
	start := end
	for start >= 0 && !strings.Contains(lines[start], "<!--") {
		start--
	}
	if start < 0 || !isMarkerStart(lines[start]) {
		return nil, nil // an ordinary comment
	}
	m := &Marker{Line: start + 1}
	first := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lines[start]), "<!--"))
	first = strings.TrimSpace(strings.TrimPrefix(first, markerPrefix))
	switch {
	case strings.HasPrefix(first, excluded):
		if start != end {
			return nil, fmt.Errorf("%s:%d: a %q marker is one line", file, m.Line, excluded)
		}
		m.Excluded = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(first, excluded), "-->"))
		if m.Excluded == "" {
			return nil, fmt.Errorf("%s:%d: %q needs a reason", file, m.Line, excluded)
		}
	case first == fragment:
		frame := lines[start+1 : end]
		if last := strings.TrimSpace(lines[end]); last != "-->" {
			frame = append(frame, strings.TrimSuffix(lines[end], "-->"))
		}
		n := 0
		for _, l := range frame {
			if strings.TrimSpace(l) == placeholder {
				n++
			}
		}
		if n != 1 {
			return nil, fmt.Errorf("%s:%d: the frame of a fragment has %d lines %q, want one (where the block goes)", file, m.Line, n, placeholder)
		}
		m.Frame, m.FrameLine = strings.Join(frame, "\n")+"\n", start+2
	case strings.HasPrefix(first, ShellNotRun):
		if start != end {
			return nil, fmt.Errorf("%s:%d: a %q marker is one line", file, m.Line, ShellNotRun)
		}
		m.Shell = ShellNotRun
		m.NotRun = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(first, ShellNotRun), "-->"))
		if m.NotRun == "" {
			return nil, fmt.Errorf("%s:%d: %q needs a reason", file, m.Line, ShellNotRun)
		}
	case start == end && slices.Contains([]string{ShellInClone, ShellInModule, ShellNeedsCluster}, strings.TrimSpace(strings.TrimSuffix(first, "-->"))):
		m.Shell = strings.TrimSpace(strings.TrimSuffix(first, "-->"))
	default:
		return nil, fmt.Errorf("%s:%d: unknown snippet marker %q: want %q or %q followed by the frame on the next lines (Go), or %q, %q, %q or %q (shell)",
			file, m.Line, first, excluded+" REASON", fragment, ShellInClone, ShellInModule, ShellNeedsCluster, ShellNotRun+" REASON")
	}
	return m, nil
}
