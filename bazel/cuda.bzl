"""CUDA static libraries built by the system nvcc through a genrule (no rules_cuda offline).

`cuda_library` compiles .cu files into a static archive when nvcc was found (see
//bazel:system_libs.bzl) and `--define=cuda=off` was not given; otherwise the target builds the
given `fallback_srcs` with the host compiler. Either way dependants see the same headers.
"""

load("@cuda_config//:cuda.bzl", "CUDA_FOUND", "CUDA_PATH")

_GENCODE = " ".join([
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
])

def cuda_library(name, srcs, hdrs, fallback_srcs = [], deps = [], **kwargs):
    if not CUDA_FOUND:
        native.cc_library(name = name, srcs = fallback_srcs, hdrs = hdrs, deps = deps, **kwargs)
        return
    archive = "lib%s_cuda.a" % name
    native.genrule(
        name = name + "_nvcc",
        srcs = srcs + hdrs,
        outs = [archive],
        cmd = " ".join([
            CUDA_PATH + "/bin/nvcc -std=c++17 -O3 -lib -Xcompiler=-fPIC -I.",
            _GENCODE,
            "-o $@",
            " ".join(["$(location %s)" % s for s in srcs]),
        ]),
    )
    native.cc_library(
        name = name + "_cuda_archive",
        srcs = [archive],
        linkstatic = True,
        linkopts = ["-L%s/lib64" % CUDA_PATH, "-lcudart_static", "-ldl", "-lrt", "-lpthread"],
    )
    native.cc_library(
        name = name,
        hdrs = hdrs,
        srcs = select({
            "//bazel:cuda_off": fallback_srcs,
            "//conditions:default": [],
        }),
        deps = deps + select({
            "//bazel:cuda_off": [],
            "//conditions:default": [":" + name + "_cuda_archive"],
        }),
        **kwargs
    )
