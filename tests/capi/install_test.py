#!/usr/bin/env python3
"""`cmake --install` of the build into a temporary prefix (what `make install` runs), then
examples/c/score_pairs.c compiled through pkg-config twice, against libsluice.so (sluice.pc)
and statically against libsluice.a (sluice-static.pc); both programs, the Python example
(examples/python/score_pairs.py with the installed sluice.py) and, given --javac/--java, the
Java example (examples/java/ScorePairs.java with the installed sluice.jar and
libsluice_jni.so) must print the CLI's scores (`sluice score`, %.9g) for the same pairs. Checks too that libsluice.so exports the C
API only, that the installed header compiles as C alone, and the SONAME."""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

PAIRS = [("How do salmon swim up the river?", "Salmon swim up the cold river every spring."),
         ("How do salmon swim up the river?", "Traders sell shares at the busy market."),
         ("How do salmon swim up the river?", "")]


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--cc", required=True)
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--example", required=True)
    ap.add_argument("--demo", required=True)
    ap.add_argument("--javac")
    ap.add_argument("--java")
    a = ap.parse_args()
    examples = os.path.dirname(os.path.dirname(os.path.abspath(a.example)))
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "prefix")
        run(["cmake", "--install", a.build_dir, "--prefix", prefix])
        libdirs = [p for p in ("lib", "lib64", "lib/x86_64-linux-gnu")
                   if os.path.exists(os.path.join(prefix, p, "pkgconfig", "sluice.pc"))]
        assert libdirs, "no sluice.pc installed"
        libdir = os.path.join(prefix, libdirs[0])
        for f in ("libsluice.a", "libsluice.so", "libsluice.so.1", "pkgconfig/sluice-static.pc"):
            assert os.path.exists(os.path.join(libdir, f)), f
        assert os.path.exists(os.path.join(prefix, "include", "sluice", "sluice.h"))
        assert os.path.exists(os.path.join(prefix, "bin", "sluice"))
        soname = run(["objdump", "-p", os.path.join(libdir, "libsluice.so")])
        assert "SONAME               libsluice.so.1" in soname, soname
        syms = run(["nm", "-D", "--defined-only", os.path.join(libdir, "libsluice.so")])
        exported = [l.split()[-1].split("@")[0] for l in syms.splitlines()
                    if l.split()[1:2] == ["T"]]  # name@@SLUICE_1 (src/capi/sluice.map)
        assert exported and all(s.startswith("sluice_") for s in exported), exported[:20]
        assert "sluice_score_pairs" in exported

        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"))
        flags = {pc: run(["pkg-config", "--cflags", "--libs", pc], env).split()
                 for pc in ("sluice", "sluice-static")}
        # The header alone, as strict C.
        hdr = os.path.join(d, "hdr.c")
        open(hdr, "w").write("#include <sluice/sluice.h>\nint main(void) { return "
                             "sluice_api_version() == SLUICE_API_VERSION ? 0 : 1; }\n")
        run([a.cc, "-std=c99", "-Wall", "-Wextra", "-Wpedantic", "-Werror", hdr, "-o",
             os.path.join(d, "hdr")] + flags["sluice"])

        with tempfile.TemporaryDirectory() as t:
            inp, out = os.path.join(t, "in.jsonl"), os.path.join(t, "out.jsonl")
            with open(inp, "w") as f:
                for q, doc in PAIRS:
                    f.write(json.dumps({"query": q, "document": doc}) + "\n")
            run([a.sluice, "score", "--model", a.demo, "--input", inp, "--output", out,
                 "--threads", "2"])
            want = ["%.9g" % json.loads(l)["score"] for l in open(out)]
        for pc in ("sluice", "sluice-static"):
            exe = os.path.join(d, "score_pairs_" + pc)
            run([a.cc, "-std=c11", "-Wall", "-Wextra", "-Werror", a.example, "-o", exe]
                + flags[pc])
            dyn = run(["objdump", "-p", exe])
            assert ("NEEDED               libsluice.so.1" in dyn) == (pc == "sluice"), pc
            e = dict(os.environ, LD_LIBRARY_PATH=libdir)
            got = run([exe, a.demo, PAIRS[0][0]] + [doc for _, doc in PAIRS], e)
            scores = [l.split("\t")[0] for l in got.splitlines()]
            # The CLI writes %.9g of the float as a double: the same text for the same float.
            want_txt = ["%.9g" % float(w) for w in want]
            if scores != want_txt:
                raise SystemExit(f"{pc}: example printed {scores}, the CLI {want_txt}")
            print(f"{pc}: {exe} prints the CLI's scores {scores}")

        def f32(text):  # %.9g text (C, Python, Java spellings) -> the float32's bits
            return struct.unpack("<I", struct.pack("<f", float(text)))[0]

        def check(name, out):
            scores = [l.split("\t")[0] for l in out.splitlines()]
            if [f32(x) for x in scores] != [f32(w) for w in want]:
                raise SystemExit(f"{name} printed {scores}, the CLI {want}")
            print(f"{name} prints the CLI's scores {scores}")

        args = [a.demo, PAIRS[0][0]] + [doc for _, doc in PAIRS]
        py = os.path.join(prefix, "share", "sluice", "python")
        assert os.path.exists(os.path.join(py, "sluice.py"))
        e = dict(os.environ, PYTHONPATH=py,
                 SLUICE_LIBRARY=os.path.join(libdir, "libsluice.so"))
        check("examples/python/score_pairs.py",
              run([sys.executable, os.path.join(examples, "python", "score_pairs.py")] + args, e))
        if a.javac and a.java:
            jar = os.path.join(prefix, "share", "java", "sluice.jar")
            assert os.path.exists(jar) and os.path.exists(os.path.join(libdir, "libsluice_jni.so"))
            classes = os.path.join(d, "classes")
            run([a.javac, "-Xlint:all", "-Werror", "-cp", jar, "-d", classes,
                 os.path.join(examples, "java", "ScorePairs.java")])
            e = dict(os.environ, LD_LIBRARY_PATH=libdir)
            check("examples/java/ScorePairs.java",
                  run([a.java, "-Djava.library.path=" + libdir, "-cp", jar + ":" + classes,
                       "ScorePairs"] + args, e))
        else:
            print("examples/java/ScorePairs.java: not run (no JDK; capi_parity_java reports "
                  "itself skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
