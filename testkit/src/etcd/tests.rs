//! The kit's etcd against a real etcd: members killed and restarted.

use super::*;

/// [`etcdctl`] again until it succeeds, within [`LIMIT`]: a request can
/// fail while the members elect a leader (after a kill, or on a loaded
/// machine). Panics with the last failure and the logs.
fn etcdctl_until_ok(etcd: &EtcdCluster, endpoints: &[String], args: &[&str]) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        match etcdctl("5s", endpoints, args) {
            Ok(out) => return out,
            Err(_) if Instant::now() < deadline => std::thread::sleep(POLL),
            Err(last) => panic!("{last} (retried for {LIMIT:?}); {}", etcd.logs()),
        }
    }
}

/// The value of `key`, read (linearizably) through `endpoints`.
fn get(etcd: &EtcdCluster, endpoints: &[String], key: &str) -> String {
    etcdctl_until_ok(etcd, endpoints, &["get", "--print-value-only", key])
}

#[test]
fn one_member_answers_a_put_and_a_get_and_keeps_its_data_over_a_restart() {
    let mut etcd = EtcdCluster::start(1);
    let endpoints = etcd.endpoints();
    assert_eq!(endpoints, [etcd.endpoint(0)]);
    assert!(
        endpoints[0].starts_with("http://127.0.0.1:"),
        "{endpoints:?}"
    );
    assert_eq!(
        etcdctl_until_ok(&etcd, &endpoints, &["put", "k", "v"]),
        "OK\n"
    );
    assert_eq!(get(&etcd, &endpoints, "k"), "v\n");
    etcd.restart_member(0);
    assert_eq!(etcd.endpoints(), endpoints, "the same ports");
    assert_eq!(get(&etcd, &endpoints, "k"), "v\n");
}

#[test]
fn three_members_answer_with_one_down_not_with_none_and_keep_their_data() {
    let mut etcd = EtcdCluster::start(3);
    let all = etcd.endpoints();
    assert_eq!(all.len(), 3);
    assert!(
        all[0] != all[1] && all[1] != all[2] && all[0] != all[2],
        "{all:?}"
    );
    etcdctl_until_ok(&etcd, &[etcd.endpoint(0)], &["put", "before", "1"]);
    for endpoint in &all {
        // A linearizable read through each member: all three are in.
        assert_eq!(get(&etcd, std::slice::from_ref(endpoint), "before"), "1\n");
    }

    etcd.kill_member(0);
    let rest = [etcd.endpoint(1), etcd.endpoint(2)];
    etcdctl_until_ok(&etcd, &rest, &["put", "during", "2"]);
    for endpoint in &rest {
        let one = std::slice::from_ref(endpoint);
        assert_eq!(get(&etcd, one, "before"), "1\n");
        assert_eq!(get(&etcd, one, "during"), "2\n");
    }

    etcd.stop_all();
    // Every member was killed and reaped: nothing listens on their
    // ports, so this fails, after its 1 s.
    let answer = etcdctl("1s", &all, &["get", "before"]);
    assert!(answer.is_err(), "a stopped cluster answered: {answer:?}");

    etcd.start_all();
    assert_eq!(etcd.endpoints(), all, "the same ports");
    for endpoint in &all {
        let one = std::slice::from_ref(endpoint);
        assert_eq!(get(&etcd, one, "before"), "1\n");
        assert_eq!(get(&etcd, one, "during"), "2\n");
    }
}

#[test]
fn a_port_taken_before_etcd_binds_it_is_picked_again() {
    let taken = TcpListener::bind(("127.0.0.1", 0)).expect("binding a port to hold");
    let taken_port = taken.local_addr().expect("its port").port();
    let mut picks = 0;
    let etcd = EtcdCluster::start_on(1, |n| {
        picks += 1;
        let mut ports = free_ports(n);
        if picks == 1 {
            ports[0] = taken_port;
        }
        ports
    });
    assert_eq!(picks, 2, "one clash, one start");
    assert_ne!(etcd.endpoint(0), format!("http://127.0.0.1:{taken_port}"));
    let log = std::fs::read_to_string(etcd.log_path(0)).expect("the member's log");
    let clash = log
        .find("address already in use")
        .expect("the first attempt's member says why it stopped");
    let again = log
        .find("starting again on new ports")
        .expect("the kit says it starts again");
    assert!(clash < again, "{log}");
    assert_eq!(
        etcdctl_until_ok(&etcd, &etcd.endpoints(), &["put", "k", "v"]),
        "OK\n"
    );
    drop(taken);
}

#[test]
#[should_panic(expected = "`apt-get install etcd-server` (.ci/run installs it)")]
fn a_missing_server_says_how_to_install_it() {
    etcd_server_at(Some(PathBuf::from("/nonexistent/etcd")));
}
