"""conformance_test: the conformance cases linked with one store's GetStoreUnderTest()."""

def conformance_test(name, main, deps = [], size = "small", **kwargs):
    native.cc_test(
        name = name,
        size = size,
        srcs = [main, "//tests/conformance:cases"],
        deps = deps + [
            "//tests/conformance:store_under_test",
            "//tests:catch_main",
            "//tests:test_util",
            "//client:kvstore",
            "//common:partitioner",
            "//common/store:optimizer",
        ],
        **kwargs
    )
