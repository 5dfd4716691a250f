// Command etcd is a single-member etcd for the test control plane: a small main over the
// embed package of the etcd server release that k8s.io/kubernetes itself requires. It
// listens on loopback only and keeps its data in one directory; fsync is off because the
// data lives only as long as one test session.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "directory for etcd's data (required)")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "loopback URL for clients")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "loopback URL for the (lone) peer")
	flag.Parse()
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		os.Exit(2)
	}
	if err := run(*dataDir, *clientURL, *peerURL); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		os.Exit(1)
	}
}

func run(dataDir, clientURL, peerURL string) error {
	client, err := url.Parse(clientURL)
	if err != nil {
		return fmt.Errorf("--listen-client-url: %w", err)
	}
	peer, err := url.Parse(peerURL)
	if err != nil {
		return fmt.Errorf("--listen-peer-url: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = dataDir
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "warn"

	server, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer server.Close()

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-server.Server.ReadyNotify():
		fmt.Fprintln(os.Stderr, "etcd: ready on", clientURL)
	case err := <-server.Err():
		return err
	case <-stop:
		return nil
	}
	select {
	case err := <-server.Err():
		return err
	case <-stop:
		return nil
	}
}
