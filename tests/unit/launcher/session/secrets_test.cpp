// --secret: where a value comes from, what is refused (without quoting a value), and the
// start-up channel the launcher writes, read back as the proxy reads it.
#include "vibepit/launcher/session/secrets.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "vibepit/control/startup_channel.hpp"

namespace vibepit::launcher {
namespace {

std::string error_of(const std::string& text) {
  try {
    read_secret_option(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(SecretOption, FromTheEnvironmentWhichIsThenUnset) {
  ::setenv("VP_TEST_TOKEN", "tok_from_env_123", 1);
  const auto s = read_secret_option("VP_TEST_TOKEN=api.test:443");
  EXPECT_EQ(s.value->reveal(), "tok_from_env_123");
  EXPECT_EQ(s.spec.header, "Authorization");
  EXPECT_EQ(std::getenv("VP_TEST_TOKEN"), nullptr);
  EXPECT_NE(error_of("VP_TEST_TOKEN=api.test:443").find("not set"), std::string::npos);
}

TEST(SecretOption, FromAFile) {
  const std::string path = ::testing::TempDir() + "vp-secret-file";
  { std::ofstream(path) << "tok_from_file_456\n"; }
  const auto s = read_secret_option("GIT=git.test:443,format=basic:x-access-token,file=" + path);
  EXPECT_EQ(s.value->reveal(), "tok_from_file_456");
  EXPECT_EQ(s.spec.format, "basic:x-access-token");
  ::unlink(path.c_str());
}

TEST(SecretOption, RefusalsSayWhyWithoutTheValue) {
  ::setenv("VP_BAD", "line1\r\nX-Evil: 1", 1);
  const auto bad = error_of("VP_BAD=api.test:443");
  EXPECT_NE(bad.find("control character"), std::string::npos) << bad;
  EXPECT_EQ(bad.find("line1"), std::string::npos) << bad;
  EXPECT_NE(error_of("HTTP_PROXY=api.test:443").find("vibepit's own"), std::string::npos);
  EXPECT_NE(error_of("VIBEPIT_X=api.test:443").find("vibepit's own"), std::string::npos);
  EXPECT_NE(error_of("A=api.test:443,file=/x,stdin").find("one source"), std::string::npos);
  EXPECT_NE(error_of("A=api.test:443,colour=red").find("not one of"), std::string::npos);
  EXPECT_NE(error_of("A=api.test").find("--secret"), std::string::npos);
}

TEST(SecretOption, SeveralMayNotClash) {
  ::setenv("VP_A", "a", 1);
  ::setenv("VP_B", "b", 1);
  try {
    read_secret_options({"VP_A=api.test:443", "VP_B=api.test:443,header=authorization"});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("both set"), std::string::npos) << e.what();
  }
}

TEST(SessionSecrets, NetworkFileEntriesTakeTheirValueFromTheEnvironment) {
  ::setenv("VP_FLAG", "from-flag", 1);
  ::setenv("VP_FILE", "from-env", 1);
  ::unsetenv("VP_MISSING");
  std::ostringstream err;
  const auto all = session_secrets({"VP_FLAG=a.test:443"},
                                   {"VP_FLAG=b.test:443,header=Authorization,format=Bearer {}",
                                    "VP_FILE=c.test:443,header=Authorization,format=Bearer {}",
                                    "VP_MISSING=d.test:443,header=Authorization,format=Bearer {}"},
                                   err);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].spec.host.text, "a.test:443");  // the flag wins over the file
  EXPECT_EQ(all[1].spec.name, "VP_FILE");
  EXPECT_EQ(all[1].value->reveal(), "from-env");
  EXPECT_NE(err.str().find("VP_MISSING"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("starts without it"), std::string::npos) << err.str();
}

TEST(StartupChannel, TheProxyReadsWhatTheLauncherWrites) {
  ::setenv("VP_CH1", "value-one", 1);
  ::setenv("VP_CH2", "value two", 1);
  const auto secrets =
      read_secret_options({"VP_CH1=a.test:443", "VP_CH2=b.test:8443,header=X-Key,format={}"});
  control::PeerCredentials server;
  server.ca_cert_pem = "CA\nPEM";
  server.own.cert_pem = "CERT";
  server.own.key_pem = "KEY";
  const auto bytes = startup_channel(server, secrets);
  const auto got = control::parse_startup_channel(bytes->reveal());
  EXPECT_EQ(got.server.ca_cert_pem, "CA\nPEM");
  EXPECT_EQ(got.server.own.key_pem, "KEY");
  ASSERT_EQ(got.credentials.size(), 2u);
  EXPECT_EQ(got.credentials[0].value->reveal(), "Bearer value-one");
  EXPECT_EQ(got.credentials[1].spec.header, "X-Key");
  EXPECT_EQ(got.credentials[1].value->reveal(), "value two");
  EXPECT_EQ(placeholder("VP_CH1"), "vibepit-secret-VP_CH1");
}

TEST(StartupChannel, OnlyCredentialsIsTheOldForm) {
  const auto got = control::parse_startup_channel(R"({"ca":"C","cert":"T","key":"K"})");
  EXPECT_EQ(got.server.own.cert_pem, "T");
  EXPECT_TRUE(got.credentials.empty());
}

TEST(StartupChannel, BadRecordsAreRefusedWithoutTheirValue) {
  const std::string head = R"({"ca":"C","cert":"T","key":"K"})"
                           "\n";
  for (const std::string& bad :
       {head + "secret A=a.test:443 5\nsecret-value\n", head + "secret A=a.test:443 x\nv\n",
        head + "secret A=a.test 6\nsecret\n", head + "nonsense\n",
        head + "secret A=a.test:443 8\nsec\r\nret\n",
        head + "secret A=a.test:443 6\nsecret\nsecret A=b.test:443 6\nsecret\n"}) {
    try {
      control::parse_startup_channel(bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).find("secret-value"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("start-up channel"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace vibepit::launcher
