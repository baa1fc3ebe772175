#include "vibepit/control/credentials.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include <gtest/gtest.h>

#include "vibepit/control/session_dir.hpp"

namespace vibepit::control {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

CredentialOptions options() {
  CredentialOptions o;
  o.session_id = "abc123";
  o.server_ips = {"192.0.2.9", "2001:db8::9"};
  o.lifetime = 3600s;
  o.clock_skew = 300s;
  return o;
}

TEST(Credentials, CertificatesHaveTheirRoles) {
  auto creds = issue_session_credentials(options());
  auto ca = inspect_certificate(creds.ca_cert_pem);
  auto server = inspect_certificate(creds.server.cert_pem);
  auto client = inspect_certificate(creds.client.cert_pem);

  EXPECT_TRUE(ca.is_ca);
  EXPECT_FALSE(server.is_ca);
  EXPECT_FALSE(client.is_ca);
  EXPECT_EQ(ca.key_type, "ED25519");
  EXPECT_EQ(server.key_type, "ED25519");
  EXPECT_EQ(client.key_type, "ED25519");

  EXPECT_TRUE(server.server_auth);
  EXPECT_FALSE(server.client_auth);  // the server's certificate cannot act as a client
  EXPECT_TRUE(client.client_auth);
  EXPECT_FALSE(client.server_auth);

  EXPECT_EQ(server.san_ips, (std::vector<std::string>{"127.0.0.1", "192.0.2.9", "2001:db8::9"}));
  EXPECT_TRUE(client.san_ips.empty());
  EXPECT_NE(server.subject_cn.find("abc123"), std::string::npos);
}

TEST(Credentials, SerialsAreRandom128Bit) {
  std::set<std::string> seen;
  for (int i = 0; i < 8; ++i) {
    auto creds = issue_session_credentials(options());
    for (const auto* pem : {&creds.ca_cert_pem, &creds.server.cert_pem, &creds.client.cert_pem}) {
      auto info = inspect_certificate(*pem);
      // The top byte is never zero, so all 128 bits are significant.
      EXPECT_GT(info.serial_bits, 120u);
      EXPECT_LE(info.serial_bits, 128u);
      EXPECT_TRUE(seen.insert(info.serial_hex).second) << "serial repeated: " << info.serial_hex;
    }
  }
}

TEST(Credentials, ValidityAllowsForSkewAndHonoursLifetime) {
  auto before = std::chrono::system_clock::now();
  auto creds = issue_session_credentials(options());
  for (const auto* pem : {&creds.ca_cert_pem, &creds.server.cert_pem, &creds.client.cert_pem}) {
    auto info = inspect_certificate(*pem);
    auto nb = before - info.not_before;
    EXPECT_GE(nb, 299s);  // skew of 300 s, and ASN.1 time has 1 s resolution
    EXPECT_LE(nb, 302s);
    auto life = info.not_after - before;
    EXPECT_GE(life, 3598s);
    EXPECT_LE(life, 3602s);
  }
}

TEST(Credentials, EachCertificateVerifiesAgainstItsSessionCaOnly) {
  auto a = issue_session_credentials(options());
  auto b = issue_session_credentials(options());
  EXPECT_TRUE(verifies_against(a.server.cert_pem, a.ca_cert_pem));
  EXPECT_TRUE(verifies_against(a.client.cert_pem, a.ca_cert_pem));
  EXPECT_FALSE(verifies_against(a.client.cert_pem, b.ca_cert_pem));
  EXPECT_FALSE(verifies_against(b.server.cert_pem, a.ca_cert_pem));
  EXPECT_TRUE(key_matches_certificate(a.server.key_pem, a.server.cert_pem));
  EXPECT_TRUE(key_matches_certificate(a.client.key_pem, a.client.cert_pem));
  EXPECT_FALSE(key_matches_certificate(a.client.key_pem, a.server.cert_pem));
}

// The CA key is gone: after issue() the authority holds no key, cannot sign again, and
// no private key handed out belongs to the CA certificate.
TEST(Credentials, CaKeyIsDiscardedAfterIssuing) {
  SessionAuthority ca(options());
  ASSERT_TRUE(ca.holds_key());
  auto creds = ca.issue();
  EXPECT_FALSE(ca.holds_key());
  EXPECT_THROW(ca.issue(), std::logic_error);
  EXPECT_EQ(creds.ca_cert_pem, ca.ca_cert_pem());
  EXPECT_FALSE(key_matches_certificate(creds.server.key_pem, creds.ca_cert_pem));
  EXPECT_FALSE(key_matches_certificate(creds.client.key_pem, creds.ca_cert_pem));
  // Nothing in the set a caller receives is a key beside the two leaf keys.
  for (const auto* pem : {&creds.ca_cert_pem, &creds.server.cert_pem, &creds.client.cert_pem}) {
    EXPECT_EQ(pem->find("PRIVATE KEY"), std::string::npos);
  }
}

TEST(Credentials, RejectsBadOptions) {
  auto o = options();
  o.server_ips.push_back("not-an-ip");
  EXPECT_THROW(SessionAuthority{o}, std::runtime_error);
  o = options();
  o.lifetime = 0s;
  EXPECT_THROW(SessionAuthority{o}, std::runtime_error);
  EXPECT_THROW(inspect_certificate("garbage"), std::runtime_error);
}

class SessionDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vibepit-sessdir-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }
  static unsigned mode(const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 0777;
  }
  fs::path root_;
};

TEST_F(SessionDirTest, WritesPrivateFilesAndReadsThemBack) {
  auto creds = issue_session_credentials(options());
  auto dir = root_ / "state" / "vibepit" / "sessions" / "abc123";
  SessionInfo info{"abc123", "127.0.0.1:4433", 42, "2026-01-01T00:00:00Z", "/work/project"};
  write_client_set(dir, creds.client_side(), info);

  EXPECT_EQ(mode(dir), 0700u);
  for (const char* f : {"ca.pem", "client.pem", "client-key.pem", "session.json"}) {
    EXPECT_EQ(mode(dir / f), 0600u) << f;
  }
  // The server's private key is never written.
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find(creds.server.key_pem), std::string::npos) << entry.path();
  }

  auto back = read_client_set(dir);
  EXPECT_EQ(back.info.id, "abc123");
  EXPECT_EQ(back.info.control, "127.0.0.1:4433");
  EXPECT_EQ(back.info.pid, 42);
  EXPECT_EQ(back.info.project, "/work/project");
  EXPECT_EQ(back.client.own.key_pem, creds.client.key_pem);
  EXPECT_EQ(back.client.ca_cert_pem, creds.ca_cert_pem);
  EXPECT_EQ(list_session_dirs(dir.parent_path()), std::vector<fs::path>{dir});
}

TEST_F(SessionDirTest, RefusesCredentialsOthersCanRead) {
  auto creds = issue_session_credentials(options());
  auto dir = root_ / "s1";
  write_client_set(dir, creds.client_side(), {"s1", "127.0.0.1:1", 0, "", ""});
  ASSERT_EQ(::chmod((dir / "client-key.pem").c_str(), 0644), 0);
  try {
    read_client_set(dir);
    FAIL() << "a world-readable key was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("chmod 600"), std::string::npos) << e.what();
  }
  ASSERT_EQ(::chmod((dir / "client-key.pem").c_str(), 0600), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  EXPECT_THROW(read_client_set(dir), std::runtime_error);
  // Writing again tightens the directory back to 0700.
  write_client_set(dir, creds.client_side(), {"s1", "127.0.0.1:1", 0, "", ""});
  EXPECT_EQ(mode(dir), 0700u);
  EXPECT_NO_THROW(read_client_set(dir));
}

TEST_F(SessionDirTest, MissingDirectoryNamesIt) {
  try {
    read_client_set(root_ / "nope");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos);
  }
}

TEST(SessionId, IsTwelveHexDigitsAndFresh) {
  auto a = new_session_id(), b = new_session_id();
  EXPECT_EQ(a.size(), 12u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace vibepit::control
