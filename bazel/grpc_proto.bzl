"""Protocol buffer and gRPC C++ code generation with the system protoc (no download)."""

def grpc_cc_proto_library(name, src, deps = [], **kwargs):
    """Generates <src>.pb.{h,cc} and <src>.grpc.pb.{h,cc} and wraps them in a cc_library.

    Code includes the headers by their workspace path, e.g. "proto/kvstore.grpc.pb.h".
    """
    base = src[:-len(".proto")]
    outs = [base + ext for ext in [".pb.h", ".pb.cc", ".grpc.pb.h", ".grpc.pb.cc"]]
    native.genrule(
        name = name + "_codegen",
        srcs = [src],
        outs = outs,
        cmd = " ".join([
            "protoc -I. --cpp_out=$(GENDIR) --grpc_out=$(GENDIR)",
            "--plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin)",
            "$(location %s)" % src,
        ]),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["@system//:grpc"],
        **kwargs
    )
