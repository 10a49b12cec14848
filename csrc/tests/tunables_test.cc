// The tunables table: one row per knob, and Tunables::from_environment reading it as documented
// (HORO_ name first, Horovod's alias second, the default last; bad values refused by name).
// Each test sets the variables it needs and clears them again.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "common/error.h"
#include "common/tunables.h"

namespace horo {
namespace {

class Environment : public ::testing::Test {
 protected:
  void SetUp() override {
    // Start from the defaults whatever the shell running the tests has set.
    for (const auto& spec : tunable_specs()) {
      unsetenv(spec.env);
      if (spec.horovod_alias[0]) unsetenv(spec.horovod_alias);
    }
  }
  void TearDown() override { SetUp(); }
  static void set(const char* name, const char* value) { setenv(name, value, 1); }
};

TEST(TunablesTable, EveryRowIsNamedOnceAndDocumented) {
  std::set<std::string> names;
  for (const auto& spec : tunable_specs()) {
    const std::string env = spec.env, alias = spec.horovod_alias;
    EXPECT_EQ(env.rfind("HORO_", 0), 0u) << env;
    EXPECT_TRUE(names.insert(env).second) << env << " twice";
    if (!alias.empty()) {
      EXPECT_EQ(alias, "HOROVOD_" + env.substr(5)) << "Horovod's name of " << env;
    }
    EXPECT_GT(std::string(spec.doc).size(), 10u) << env << " has no meaning written down";
  }
  EXPECT_GE(names.size(), 30u);
  EXPECT_TRUE(names.count("HORO_FUSION_THRESHOLD"));
}

TEST_F(Environment, DefaultsAreTheTablesDefaults) {
  const Tunables t = Tunables::from_environment();
  EXPECT_EQ(t.fusion_threshold_bytes, 64 << 20);
  EXPECT_EQ(t.cache_capacity, 1024);
  EXPECT_EQ(t.cycle_time_ms, 1.0);
  EXPECT_EQ(t.allreduce_algo, "auto");
  EXPECT_EQ(t.transport, "auto");
  EXPECT_EQ(t.shm_small_bytes, 16384);
  EXPECT_EQ(t.fusion_max_tensor_bytes, -1) << "auto, settled at init";
  EXPECT_EQ(t.spin_microseconds, -1);
  EXPECT_EQ(t.log_level, 1) << "warning";
  EXPECT_TRUE(t.timeline_path.empty());
  EXPECT_EQ(t.stall_check_seconds, 60.0);
  EXPECT_EQ(t.gpu_transport, "auto");
  for (const auto& spec : tunable_specs()) {
    EXPECT_EQ(tunable_value(spec.env), spec.default_value) << spec.env;
  }
}

TEST_F(Environment, HorovodsNameIsReadAndHorosWins) {
  set("HOROVOD_FUSION_THRESHOLD", "1000");
  EXPECT_EQ(Tunables::from_environment().fusion_threshold_bytes, 1000);
  set("HORO_FUSION_THRESHOLD", "2000");
  EXPECT_EQ(Tunables::from_environment().fusion_threshold_bytes, 2000);
  set("HOROVOD_CACHE_CAPACITY", "7");
  EXPECT_EQ(Tunables::from_environment().cache_capacity, 7);
  set("HORO_RING_MIN_BYTES", "12");
  set("HOROVOD_RING_MIN_BYTES", "99");  // no such alias: ignored
  EXPECT_EQ(Tunables::from_environment().ring_min_bytes, 12);
}

TEST_F(Environment, ValuesAreClampedWhereTheTableSaysSo) {
  set("HORO_RING_CHUNK_BYTES", "100");
  set("HORO_SHM_CHUNK_BYTES", "1");
  set("HORO_FUSION_THRESHOLD", "-5");
  set("HORO_CACHE_CAPACITY", "-1");
  set("HORO_SHM_SINGLE_COPY_BYTES", "-3");
  const Tunables t = Tunables::from_environment();
  EXPECT_EQ(t.ring_chunk_bytes, 4096);
  EXPECT_EQ(t.shm_chunk_bytes, 4096);
  EXPECT_EQ(t.fusion_threshold_bytes, 0);
  EXPECT_EQ(t.cache_capacity, 0);
  EXPECT_EQ(t.shm_single_copy_bytes, 0);
}

TEST_F(Environment, SwitchesLogLevelsAndTheTimelinesKeyword) {
  set("HORO_HIERARCHICAL_ALLREDUCE", "True");
  set("HOROVOD_LOG_LEVEL", "TRACE");
  set("HORO_TIMELINE", "DYNAMIC");
  set("HORO_STALL_CHECK_DISABLE", "1");
  const Tunables t = Tunables::from_environment();
  EXPECT_EQ(t.hierarchical_allreduce, "1");
  EXPECT_EQ(t.log_level, 3);
  EXPECT_TRUE(t.timeline_path.empty()) << "DYNAMIC starts no timeline file";
  EXPECT_EQ(t.stall_check_seconds, 0.0);
}

TEST_F(Environment, BadValuesAreRefusedNamingTheVariable) {
  for (auto [name, value] : std::vector<std::pair<const char*, const char*>>{
           {"HORO_TRANSPORT", "tcp"},
           {"HORO_ALLREDUCE_ALGO", "tree"},
           {"HORO_GPU_TRANSPORT", "rdma"},
           {"HORO_HIERARCHICAL_ALLGATHER", "maybe"},
           {"HORO_FUSION_THRESHOLD", "64MB"},
           {"HORO_LOG_LEVEL", "loud"}}) {
    SetUp();
    set(name, value);
    try {
      Tunables::from_environment();
      ADD_FAILURE() << name << "=" << value << " was accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(name), std::string::npos) << message;
      EXPECT_NE(message.find(value), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace horo
