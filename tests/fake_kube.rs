//! Tests of the fake Kubernetes API server fixture, through the real kube client.
