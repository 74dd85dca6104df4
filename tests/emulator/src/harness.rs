//! The test harness: a cluster per test (emulator or SHOAL_TEST_KUBECONFIG).
