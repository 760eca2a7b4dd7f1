package main

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

// The bench's dependency: package cbbench, and a PEP 723 script that
// imports it.
const (
	cbbenchInit = "def answer():\n    return 42\n"
	depsBody    = "import cbbench\nprint(cbbench.answer())\n"
	depsScript  = "# /// script\n# dependencies = [\"cbbench\"]\n# ///\n" + depsBody
)

// benchWheelhouse writes a wheelhouse with two small pure-Python packages,
// readable by the build jail's user, and returns its directory: cbbench,
// which imports nothing, and cbpre, which imports a few modules of the
// standard library that the runner does not (as real packages do), for
// the preload figures. The daemon is started with --no-index --find-links
// on it.
func benchWheelhouse(tmp string) (string, error) {
	dir := filepath.Join(tmp, "wheels")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	if err := writeBenchWheel(dir, "cbbench", map[string]string{
		"cbbench/__init__.py": cbbenchInit,
	}); err != nil {
		return "", err
	}
	return dir, writeBenchWheel(dir, "cbpre", map[string]string{
		"cbpre/__init__.py": "import decimal, fractions, statistics, difflib, csv\n\n" +
			"def answer():\n    return int(statistics.median([float(fractions.Fraction(84, 2)), float(decimal.Decimal(42))]))\n",
	})
}

// writeBenchWheel writes the wheel of name 1.0 with files into dir.
func writeBenchWheel(dir, name string, files map[string]string) error {
	di := name + "-1.0.dist-info"
	files[di+"/METADATA"] = "Metadata-Version: 2.1\nName: " + name + "\nVersion: 1.0\n"
	files[di+"/WHEEL"] = "Wheel-Version: 1.0\nGenerator: cellblock-bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
	var record strings.Builder
	for name, content := range files {
		sum := sha256.Sum256([]byte(content))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(content))
	}
	files[di+"/RECORD"] = record.String() + di + "/RECORD,,\n"
	f, err := os.OpenFile(filepath.Join(dir, name+"-1.0-py3-none-any.whl"), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	zw := zip.NewWriter(f)
	for name, content := range files {
		w, err := zw.Create(name)
		if err == nil {
			_, err = w.Write([]byte(content))
		}
		if err != nil {
			f.Close()
			return err
		}
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// depsBench reports what dependencies cost: the first run of a PEP 723
// script with one dependency (which builds its environment), the cached
// runs of the same script, and the same program without dependencies,
// interleaved.
func depsBench(c *client.Client, n int) error {
	ctx := context.Background()
	// The state directory is kept between benchmarks: start cold.
	if _, err := c.PruneEnvs(ctx); err != nil {
		return fmt.Errorf("prune environments: %w", err)
	}
	withDeps := &api.RunRequest{Code: depsScript}
	without := &api.RunRequest{Code: "def answer():\n    return 42\nprint(answer())\n"}
	timed := func(req *api.RunRequest) (time.Duration, *api.Result, error) {
		start := time.Now()
		res, err := c.Run(ctx, req)
		d := time.Since(start)
		if err == nil && (res.Error != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "42") {
			err = fmt.Errorf("run failed: %+v", res)
		}
		return d, res, err
	}
	cold, coldRes, err := timed(withDeps)
	if err != nil {
		return err
	}
	if coldRes.Environment == nil || coldRes.Environment.CacheHit {
		return fmt.Errorf("the first run did not build its environment: %+v", coldRes.Environment)
	}
	var cached, plain, attach []time.Duration
	for i := 0; i < n; i++ {
		d, res, err := timed(withDeps)
		if err != nil {
			return err
		}
		if !res.Environment.CacheHit {
			return fmt.Errorf("run %d rebuilt the environment", i)
		}
		cached = append(cached, d)
		attach = append(attach, time.Duration(res.Phases.EnvUs)*time.Microsecond)
		if d, _, err = timed(without); err != nil {
			return err
		}
		plain = append(plain, d)
	}
	fmt.Printf("\na PEP 723 script with one dependency from a local wheelhouse (%s; API calls, %d interleaved runs):\n\n",
		coldRes.Environment.Packages[0].Name+" "+coldRes.Environment.Packages[0].Version, n)
	fmt.Println("| run | median | p90 | environment |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| first run (builds the environment) | %s | - | %s |\n", ms(cold), ms(time.Duration(coldRes.Phases.EnvUs)*time.Microsecond))
	fmt.Printf("| cached run | %s | %s | %d µs |\n", ms(median(cached)), ms(percentile(cached, 0.9)), median(attach).Microseconds())
	fmt.Printf("| no dependencies | %s | %s | - |\n", ms(median(plain)), ms(percentile(plain, 0.9)))
	fmt.Printf("\na cached environment costs %s more than none (median); building it cost %s once.\n",
		ms(median(cached)-median(plain)), ms(cold-median(plain)))
	return nil
}

// warmDepsBench compares, on the daemon with prestarted jails, cached runs
// of the PEP 723 script in the jail kept for its shape with the same
// program without dependencies in a default one, interleaved, each after
// both kinds of jail are ready again.
func warmDepsBench(d *benchDaemon, n int) error {
	ctx := context.Background()
	withDeps := &api.RunRequest{Code: depsScript}
	without := &api.RunRequest{Code: "def answer():\n    return 42\nprint(answer())\n"}
	timed := func(req *api.RunRequest) (time.Duration, error) {
		if err := d.settleShapes(1); err != nil {
			return 0, err
		}
		start := time.Now()
		res, err := d.Client.Run(ctx, req)
		took := time.Since(start)
		if err == nil && (res.Error != nil || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "42" || !res.Phases.Prestarted) {
			err = fmt.Errorf("warm run failed or not prestarted: %+v", res)
		}
		return took, err
	}
	// The first run makes the daemon keep a jail of the script's shape.
	if _, err := d.Client.Run(ctx, withDeps); err != nil {
		return err
	}
	var deps, plain []time.Duration
	for i := 0; i < n; i++ {
		t, err := timed(withDeps)
		if err != nil {
			return err
		}
		deps = append(deps, t)
		if t, err = timed(without); err != nil {
			return err
		}
		plain = append(plain, t)
	}
	fmt.Printf("\nthe same script in prestarted jails (API calls, %d interleaved runs):\n\n", n)
	fmt.Println("| run | median | p90 | vs no dependencies |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| one cached dependency, in the jail kept for its shape | %s | %s | %.2f× |\n", ms(median(deps)), ms(percentile(deps, 0.9)), float64(median(deps))/float64(median(plain)))
	fmt.Printf("| no dependencies, a default jail | %s | %s | 1.00× |\n", ms(median(plain)), ms(percentile(plain, 0.9)))
	return preloadBench(d, n)
}

// preloadBench measures, inside the run, what `import cbpre` costs in a
// prestarted jail of an environment that preloads it and in one of an
// environment that does not (the same package under another requirement
// string, so another environment), interleaved, each after every kind of
// jail is ready again; and the whole API call of each.
func preloadBench(d *benchDaemon, n int) error {
	ctx := context.Background()
	const code = "import time\nt0 = time.perf_counter()\nimport cbpre\nt1 = time.perf_counter()\n" +
		"print(cbpre.answer(), round((t1 - t0) * 1e6))\n"
	preloaded := &api.RunRequest{Code: code, Dependencies: []string{"cbpre"}}
	plain := &api.RunRequest{Code: code, Dependencies: []string{"cbpre>=1"}}
	// The build prestarts the preloading environment's jail; the other
	// gets its own after its first run. With cbbench's, three shapes.
	if _, err := d.Client.BuildEnv(ctx, &api.EnvBuildRequest{Dependencies: []string{"cbpre"}, Preload: []string{"cbpre"}}); err != nil {
		return fmt.Errorf("build the preloading environment: %w", err)
	}
	if _, err := d.Client.Run(ctx, plain); err != nil {
		return err
	}
	const shapes = 3
	timed := func(req *api.RunRequest) (call, imp time.Duration, err error) {
		if err := d.settleShapes(shapes); err != nil {
			return 0, 0, err
		}
		start := time.Now()
		res, err := d.Client.Run(ctx, req)
		call = time.Since(start)
		if err != nil {
			return 0, 0, err
		}
		var answer, us int64
		if _, serr := fmt.Sscanf(res.Stdout, "%d %d", &answer, &us); serr != nil || answer != 42 || res.Error != nil || res.ExitCode != 0 || !res.Phases.Prestarted {
			return 0, 0, fmt.Errorf("preload run failed or not prestarted: %+v", res)
		}
		return call, time.Duration(us) * time.Microsecond, nil
	}
	var preCall, preImp, plainCall, plainImp []time.Duration
	for i := 0; i < n; i++ {
		c, imp, err := timed(preloaded)
		if err != nil {
			return err
		}
		preCall, preImp = append(preCall, c), append(preImp, imp)
		if c, imp, err = timed(plain); err != nil {
			return err
		}
		plainCall, plainImp = append(plainCall, c), append(plainImp, imp)
	}
	fmt.Printf("\n`import cbpre` (a package that imports decimal, fractions, statistics, difflib and csv) inside the run, in prestarted jails (time.perf_counter around the import; API calls, %d interleaved runs):\n\n", n)
	fmt.Println("| environment | import, median | import, p90 | API call, median | API call, p90 |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Printf("| preloads cbpre | %s | %s | %s | %s |\n", usText(median(preImp)), usText(percentile(preImp, 0.9)), ms(median(preCall)), ms(percentile(preCall, 0.9)))
	fmt.Printf("| does not preload | %s | %s | %s | %s |\n", usText(median(plainImp)), usText(percentile(plainImp, 0.9)), ms(median(plainCall)), ms(percentile(plainCall, 0.9)))
	target := "met"
	if median(preImp) >= time.Millisecond {
		target = "missed"
	}
	fmt.Printf("\na preloaded import costs %s against %s (target < 1 ms: %s); the call %s against %s (%.2f×).\n",
		usText(median(preImp)), usText(median(plainImp)), target, ms(median(preCall)), ms(median(plainCall)),
		float64(median(preCall))/float64(median(plainCall)))
	return nil
}

// usText is d in microseconds.
func usText(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }
