"""A repository rule that binds the system Python's C headers (python3-dev) without downloading.

`python_headers` runs `pkg-config --cflags python3` when the repository is set up, links each
include folder it names into the repository and writes `@python//:headers`, a cc_library with
those folders on the include path. `@python//:version.bzl` holds PY_VERSION ("3.11"), which
names the wheel's tag. pybind11's headers (pybind11-dev) are in /usr/include already.
"""

def _python_headers_impl(rctx):
    result = rctx.execute(["pkg-config", "--cflags", "python3"])
    if result.return_code != 0:
        fail("pkg-config --cflags python3 failed (install python3-dev): %s" % result.stderr)
    version = rctx.execute(["pkg-config", "--modversion", "python3"])
    if version.return_code != 0:
        fail("pkg-config --modversion python3 failed: %s" % version.stderr)
    includes = []
    for flag in result.stdout.strip().split(" "):
        if flag.startswith("-I"):
            name = "include%d" % len(includes)
            rctx.symlink(flag[2:], name)
            includes.append(name)
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD", "\n".join([
        'package(default_visibility = ["//visibility:public"])',
        "cc_library(",
        "    name = 'headers',",
        "    hdrs = glob([%s]),"  % ", ".join(["'%s/**/*.h'" % i for i in includes]),
        "    includes = %r," % includes,
        ")",
        'exports_files(["version.bzl"])',
        "",
    ]))
    rctx.file("version.bzl", 'PY_VERSION = "%s"\n' % version.stdout.strip())

python_headers = repository_rule(
    implementation = _python_headers_impl,
    local = True,
    environ = ["PKG_CONFIG_PATH"],
)
