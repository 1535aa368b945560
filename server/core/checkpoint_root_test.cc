// Tests of CheckpointRoot: directories named relative to the root are created and used below
// it; absolute paths, ".." components and symbolic links that would leave it are refused, and
// nothing is written outside.
#include "server/core/checkpoint_root.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/test_util.h"

namespace kvstore {
namespace {

namespace fs = std::filesystem;

// Scratch is a fresh directory holding "root" and "outside", removed first if left over.
struct Scratch {
  explicit Scratch(const std::string& name) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    base = fs::path(tmp != nullptr ? tmp : "/tmp") / absl::StrCat("checkpoint_root-", name);
    fs::remove_all(base);
    fs::create_directories(base / "root");
    fs::create_directories(base / "outside");
    auto opened = CheckpointRoot::Open((base / "root").string());
    INFO(opened.status().ToString());
    REQUIRE(opened.ok());
    root = *std::move(opened);
  }
  // Outside lists everything below "outside", to show nothing was written there.
  std::vector<std::string> Outside() const {
    std::vector<std::string> found;
    for (const auto& entry : fs::recursive_directory_iterator(base / "outside")) {
      found.push_back(entry.path().string());
    }
    return found;
  }
  fs::path base;
  std::shared_ptr<const CheckpointRoot> root;
};

std::string Slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Mentions(const absl::Status& s, absl::string_view text) {
  return s.message().find(text) != absl::string_view::npos;
}

// RandomComponent returns a directory name that is neither "." nor "..", drawn from letters,
// digits and punctuation a path may hold.
std::string RandomComponent(testing::TestRng& rng) {
  static constexpr char kAlphabet[] = "abcxyzABC019-_.+ =@~";
  for (;;) {
    std::string name(static_cast<size_t>(rng.Int(1, 12)), ' ');
    for (char& c : name) c = kAlphabet[rng.Int(0, sizeof(kAlphabet) - 2)];
    if (name != "." && name != "..") return name;
  }
}

TEST_CASE("CheckpointRoot: random relative directories are made below the root and read back",
          "[checkpoint_root]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  Scratch scratch("random");
  const std::string root = scratch.root->path();
  REQUIRE(root == fs::canonical(scratch.base / "root").string());
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<std::string> parts, written;
    for (int64_t n = rng.Int(1, 5); n > 0; --n) {
      // "." and empty components ("a//b", never a leading "/") are skipped.
      if (rng.Int(0, 3) == 0) {
        written.push_back(written.empty() || rng.Int(0, 1) == 0 ? "." : "");
      }
      parts.push_back(RandomComponent(rng));
      written.push_back(parts.back());
    }
    const std::string dir = absl::StrJoin(written, "/");
    INFO("dir \"" << dir << "\"");
    const std::string expected = absl::StrCat(root, "/", absl::StrJoin(parts, "/"));
    REQUIRE(scratch.root->PathOf(dir) == expected);
    auto directory = scratch.root->OpenDirectory(dir, /*create=*/true);
    INFO(directory.status().ToString());
    REQUIRE(directory.ok());
    REQUIRE(directory->path() == expected);
    const std::string payload = absl::StrCat("payload ", trial, " ", rng.Int(0, 1 << 30));
    auto path = directory->WriteStateFile("server-0.ckpt", StateKind::kShardCheckpoint, payload);
    INFO(path.status().ToString());
    REQUIRE(path.ok());
    REQUIRE(*path == expected + "/server-0.ckpt");
    REQUIRE(fs::is_regular_file(*path));
    auto again = scratch.root->OpenDirectory(dir, /*create=*/false);
    REQUIRE(again.ok());
    REQUIRE(again->ReadStateFile("server-0.ckpt", StateKind::kShardCheckpoint).value() == payload);
  }
  REQUIRE(scratch.Outside().empty());
  // The root itself.
  for (const char* dir : {".", "./", "./."}) {
    auto directory = scratch.root->OpenDirectory(dir, /*create=*/false);
    REQUIRE(directory.ok());
    REQUIRE(directory->path() == root);
  }
}

TEST_CASE("CheckpointRoot: absolute paths, \"..\" components and NUL bytes are refused as text",
          "[checkpoint_root]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  Scratch scratch("text");
  const std::string outside = (scratch.base / "outside").string();
  std::vector<std::string> refused = {"",           "/",       outside, outside + "/x",        "..",
                                      "../outside", "a/../..", "a/..",  std::string("a\0b", 3)};
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<std::string> parts;
    for (int64_t n = rng.Int(1, 4); n > 0; --n) parts.push_back(RandomComponent(rng));
    const auto at = static_cast<size_t>(rng.Int(0, static_cast<int64_t>(parts.size())));
    std::vector<std::string> with_dots = parts;
    with_dots.insert(with_dots.begin() + static_cast<std::ptrdiff_t>(at), "..");
    refused.push_back(absl::StrJoin(with_dots, "/"));
    refused.push_back("/" + absl::StrJoin(parts, "/"));
  }
  for (const std::string& dir : refused) {
    INFO("dir \"" << dir << "\"");
    for (bool create : {true, false}) {
      const absl::Status status = scratch.root->OpenDirectory(dir, create).status();
      INFO(status.ToString());
      CHECK(absl::IsInvalidArgument(status));
      CHECK(Mentions(status, scratch.root->path()));
    }
  }
  CHECK(Mentions(scratch.root->OpenDirectory("../escape", true).status(), "\"../escape\""));
  CHECK(Mentions(scratch.root->OpenDirectory("/abs/dir", true).status(), "absolute"));
  // Nothing was made, inside or out.
  CHECK(fs::is_empty(scratch.base / "root"));
  CHECK(scratch.Outside().empty());
}

TEST_CASE("CheckpointRoot: an absolute path below the root's canonical path is accepted",
          "[checkpoint_root]") {
  testing::TestRng rng;
  INFO(rng.Describe());
  Scratch scratch("absolute");
  const std::string root = scratch.root->path();
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<std::string> parts;
    for (int64_t n = rng.Int(1, 4); n > 0; --n) parts.push_back(RandomComponent(rng));
    const std::string relative = absl::StrJoin(parts, "/");
    const std::string dir = absl::StrCat(root, "/", relative);
    INFO("dir \"" << dir << "\"");
    auto made = scratch.root->OpenDirectory(dir, /*create=*/true);
    INFO(made.status().ToString());
    REQUIRE(made.ok());
    auto same = scratch.root->OpenDirectory(relative, /*create=*/false);
    REQUIRE(same.ok());
    CHECK(made->path() == same->path());
    CHECK(scratch.root->PathOf(dir) == same->path());
    CHECK(fs::is_directory(made->path()));
  }
  // The root itself, written absolutely.
  for (const std::string& dir : {root, root + "/", root + "/."}) {
    auto directory = scratch.root->OpenDirectory(dir, /*create=*/false);
    INFO(dir << ": " << directory.status().ToString());
    REQUIRE(directory.ok());
    CHECK(directory->path() == root);
  }
  // Still refused: a sibling whose name begins with the root's, a ".." below the root, a path
  // through a symbolic link to the root (the canonical path is the one accepted).
  fs::create_directories(root + "x");
  fs::create_directory_symlink(root, scratch.base / "alias");
  for (const std::string& dir : {root + "x/a", root + "/a/../../outside", root + "/..",
                                 (scratch.base / "alias" / "a").string()}) {
    INFO("dir \"" << dir << "\"");
    const absl::Status status = scratch.root->OpenDirectory(dir, /*create=*/true).status();
    INFO(status.ToString());
    CHECK(absl::IsInvalidArgument(status));
    CHECK(Mentions(status, root));
    CHECK(Mentions(status, absl::StrCat("\"", dir, "\"")));  // DIR as given
  }
  fs::create_directory_symlink(scratch.base / "outside", fs::path(root) / "link");
  const absl::Status link = scratch.root->OpenDirectory(root + "/link/a", true).status();
  INFO(link.ToString());
  CHECK(absl::IsPermissionDenied(link));
  CHECK(scratch.Outside().empty());
}

TEST_CASE("CheckpointRoot: a symbolic link anywhere along the path is refused; nothing outside",
          "[checkpoint_root]") {
  Scratch scratch("links");
  const fs::path root = scratch.root->path();
  const fs::path outside = scratch.base / "outside";
  fs::create_directories(root / "real" / "sub");
  fs::create_directory_symlink(outside, root / "out");                  // To outside.
  fs::create_directory_symlink(root / "real", root / "back");           // Back inside.
  fs::create_directory_symlink("../../outside", root / "real" / "up");  // A parent's link.
  fs::create_symlink(outside / "missing", root / "dangling");           // To nothing.
  fs::create_directory_symlink(outside, root / "real" / "sub" / "deep");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"out", "out"},           {"out/new", "out"},         {"back", "back"},
      {"back/sub", "back"},     {"real/up", "real/up"},     {"real/up/x/y", "real/up"},
      {"dangling", "dangling"}, {"dangling/x", "dangling"}, {"./real//sub/deep", "real/sub/deep"},
  };
  for (const auto& [dir, link] : cases) {
    INFO("dir \"" << dir << "\"");
    for (bool create : {true, false}) {
      const absl::Status status = scratch.root->OpenDirectory(dir, create).status();
      INFO(status.ToString());
      CHECK(absl::IsPermissionDenied(status));
      CHECK(Mentions(status, (root / link).string() + " is a symbolic link"));
      CHECK(Mentions(status, "\"" + dir + "\""));
      CHECK(Mentions(status, root.string()));
    }
  }
  CHECK(scratch.Outside().empty());

  // A link in place of the checkpoint file: neither written through nor read.
  fs::create_directories(root / "run");
  std::ofstream(outside / "victim", std::ios::binary) << "precious";
  fs::create_symlink(outside / "victim", root / "run" / "server-0.ckpt");
  auto run = scratch.root->OpenDirectory("run", /*create=*/false);
  REQUIRE(run.ok());
  const absl::Status write =
      run->WriteStateFile("server-0.ckpt", StateKind::kShardCheckpoint, "x").status();
  INFO(write.ToString());
  CHECK(absl::IsPermissionDenied(write));
  CHECK(Mentions(write, (root / "run" / "server-0.ckpt").string()));
  const absl::Status read =
      run->ReadStateFile("server-0.ckpt", StateKind::kShardCheckpoint).status();
  INFO(read.ToString());
  CHECK(absl::IsPermissionDenied(read));
  CHECK(Slurp(outside / "victim") == "precious");
  CHECK(fs::is_symlink(root / "run" / "server-0.ckpt"));
  CHECK(scratch.Outside() == std::vector<std::string>{(outside / "victim").string()});
}

TEST_CASE("CheckpointRoot: a file where a directory is expected, and a missing directory",
          "[checkpoint_root]") {
  Scratch scratch("files");
  const fs::path root = scratch.root->path();
  std::ofstream(root / "file") << "not a directory";
  for (const std::string dir : {"file", "file/x", "file/x/y"}) {
    INFO("dir \"" << dir << "\"");
    const absl::Status status = scratch.root->OpenDirectory(dir, /*create=*/true).status();
    INFO(status.ToString());
    CHECK(absl::IsFailedPrecondition(status));
    CHECK(Mentions(status, (root / "file").string() + " is not a directory"));
  }
  const absl::Status missing = scratch.root->OpenDirectory("none/x", /*create=*/false).status();
  INFO(missing.ToString());
  CHECK(absl::IsNotFound(missing));
  CHECK(Mentions(missing, (root / "none").string()));
  CHECK(!fs::exists(root / "none"));
  // A directory named like the checkpoint file: the write fails, naming it.
  fs::create_directories(root / "run" / "server-0.ckpt");
  auto run = scratch.root->OpenDirectory("run", /*create=*/false);
  REQUIRE(run.ok());
  const absl::Status write =
      run->WriteStateFile("server-0.ckpt", StateKind::kShardCheckpoint, "x").status();
  CHECK(!write.ok());
  CHECK(Mentions(write, (root / "run" / "server-0.ckpt").string()));
  CHECK(
      absl::IsNotFound(run->ReadStateFile("server-1.ckpt", StateKind::kShardCheckpoint).status()));
  CHECK(absl::IsFailedPrecondition(
      run->ReadStateFile("server-0.ckpt", StateKind::kShardCheckpoint).status()));
  CHECK(absl::IsInvalidArgument(
      run->WriteStateFile("../x.ckpt", StateKind::kShardCheckpoint, "x").status()));
}

TEST_CASE("CheckpointRoot: a directory moved out of the root before the write is refused",
          "[checkpoint_root]") {
  Scratch scratch("moved");
  const fs::path root = scratch.root->path();
  auto run = scratch.root->OpenDirectory("a/run", /*create=*/true);
  REQUIRE(run.ok());
  fs::rename(root / "a", scratch.base / "outside" / "a");
  const absl::Status write =
      run->WriteStateFile("server-0.ckpt", StateKind::kShardCheckpoint, "x").status();
  INFO(write.ToString());
  CHECK(absl::IsPermissionDenied(write));
  CHECK(Mentions(write, root.string()));
  CHECK(fs::is_empty(scratch.base / "outside" / "a" / "run"));
}

TEST_CASE("CheckpointRoot: Open resolves the root once: links, relative names, missing parts",
          "[checkpoint_root]") {
  Scratch scratch("open");
  const fs::path base = fs::canonical(scratch.base);
  // Created when missing, parents too.
  auto made = CheckpointRoot::Open((base / "new" / "root").string());
  INFO(made.status().ToString());
  REQUIRE(made.ok());
  CHECK((*made)->path() == (base / "new" / "root").string());
  CHECK(fs::is_directory(base / "new" / "root"));
  // A link to the root is resolved to the directory it names.
  fs::create_directory_symlink(base / "new" / "root", base / "link");
  auto linked = CheckpointRoot::Open((base / "link").string());
  REQUIRE(linked.ok());
  CHECK((*linked)->path() == (base / "new" / "root").string());
  // Empty: the working directory.
  auto cwd = CheckpointRoot::Open("");
  REQUIRE(cwd.ok());
  CHECK((*cwd)->path() == fs::canonical(fs::current_path()).string());
  // A file is not a root.
  std::ofstream(base / "file") << "x";
  const absl::Status file = CheckpointRoot::Open((base / "file").string()).status();
  INFO(file.ToString());
  CHECK(!file.ok());
  CHECK(Mentions(file, (base / "file").string()));
  // Renaming the root after Open does not move where checkpoints go.
  fs::rename(base / "new" / "root", base / "new" / "renamed");
  auto directory = (*made)->OpenDirectory("x", /*create=*/true);
  INFO(directory.status().ToString());
  REQUIRE(directory.ok());
  CHECK(fs::is_directory(base / "new" / "renamed" / "x"));
}

}  // namespace
}  // namespace kvstore
