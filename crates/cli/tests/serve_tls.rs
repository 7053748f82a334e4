//! Who may connect to `cairn serve`: TLS (`--tls=on|require`, nbds:// clients: nbdinfo,
//! nbdcopy, qemu-img with tls-creds-x509), read-only exports (`--nbd-read-only`), the TCP
//! allow-list (`--nbd-allow`), the warning for a non-loopback listener without TLS, and the
//! errors for bad TLS flags. Certificates are made here with the openssl CLI. A test whose
//! client tool is missing says so and skips (CI installs them: scripts/test.sh).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod support;

use support::{cairn, files, ok, MIB};

/// Whether every tool is installed; prints why the test skips when one is not.
fn have(tools: &[(&str, &str)]) -> bool {
    for (name, package) in tools {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {name}"))
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            eprintln!("skipped: {name} is not installed (Debian package {package})");
            return false;
        }
    }
    true
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("spawn")
}

fn succeeds(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A pool `tank` over three files with a 16 MiB volume `tank/vol` (and `tank/ro`).
fn pool(dir: &Path) -> PathBuf {
    let home = dir.join("home");
    let d = files(dir, 3, 128 * MIB);
    ok(&cairn(
        &home,
        &["create", "tank", "raidz1", &d[0], &d[1], &d[2]],
    ));
    ok(&cairn(
        &home,
        &["volume", "create", "-V", "16M", "tank/vol"],
    ));
    ok(&cairn(&home, &["volume", "create", "-V", "16M", "tank/ro"]));
    home
}

/// A CA and a server certificate for 127.0.0.1 in `dir` (ca-cert.pem is what libnbd and
/// qemu read from a certificates directory).
fn certificates(dir: &Path) -> PathBuf {
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    let openssl = |args: &[&str]| {
        succeeds(Command::new("openssl").current_dir(&certs).args(args));
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca-cert.pem",
        "-days",
        "2",
        "-subj",
        "/CN=cairn test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server-key.pem",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(
        certs.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca-cert.pem",
        "-CAkey",
        "ca-key.pem",
        "-CAcreateserial",
        "-out",
        "server-cert.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    openssl(&["genpkey", "-algorithm", "rsa", "-out", "other-key.pem"]);
    certs
}

/// A client certificate from the same CA, with the CA, in `certs/client` (the names
/// libnbd looks for in a tls-certificates directory).
fn client_certificate(certs: &Path) -> PathBuf {
    let client = certs.join("client");
    std::fs::create_dir_all(&client).unwrap();
    let openssl = |args: &[&str]| {
        succeeds(Command::new("openssl").current_dir(certs).args(args));
    };
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "client/client-key.pem",
        "-out",
        "client.csr",
        "-subj",
        "/CN=cairn test client",
    ]);
    std::fs::write(
        certs.join("client.cnf"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca-cert.pem",
        "-CAkey",
        "ca-key.pem",
        "-CAcreateserial",
        "-out",
        "client/client-cert.pem",
        "-days",
        "2",
        "-extfile",
        "client.cnf",
    ]);
    std::fs::copy(certs.join("ca-cert.pem"), client.join("ca-cert.pem")).unwrap();
    client
}

/// A `cairn serve` process on a TCP port; killed on drop.
struct Server {
    child: Child,
    /// The port it listens on: the one the kernel gave it (it binds port 0, so tests
    /// running side by side never share one).
    port: u16,
    /// What it wrote to stderr so far (a thread reads it as it comes).
    log: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(home: &Path, listen: &str, extra: &[&str]) -> Server {
        let addr = format!("{listen}:0");
        let mut args = vec!["serve", "--nbd", &addr, "--duration", "120"];
        args.extend_from_slice(extra);
        args.push("tank");
        let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(&args)
            .env("CAIRN_HOME", home)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start cairn serve");
        let log = Arc::new(Mutex::new(String::new()));
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).is_ok_and(|n| n > 0) {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        let start = Instant::now();
        let port = loop {
            let bound = log.lock().unwrap().lines().find_map(|l| {
                let addr = l.strip_prefix("cairn: serving NBD on ")?;
                addr.rsplit(':').next()?.parse::<u16>().ok()
            });
            if let Some(port) = bound {
                break port;
            }
            if let Ok(Some(status)) = child.try_wait() {
                let _ = reader.join();
                panic!("cairn serve exited with {status}: {}", log.lock().unwrap());
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "cairn serve did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Server {
            child,
            port,
            log,
            reader: Some(reader),
        }
    }

    /// SIGTERM, wait, and what the server wrote to stderr.
    fn stop(mut self) -> String {
        // SAFETY: sending SIGTERM to our own child process.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        let err = self.log.lock().unwrap().clone();
        assert!(status.success(), "cairn serve exited with {status}: {err}");
        err
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_flags(certs: &Path, mode: &str) -> Vec<String> {
    vec![
        format!("--tls={mode}"),
        "--tls-cert".into(),
        certs.join("server-cert.pem").display().to_string(),
        "--tls-key".into(),
        certs.join("server-key.pem").display().to_string(),
    ]
}

fn nbdinfo_size(uri: &str) -> Result<u64, String> {
    let out = run(Command::new("nbdinfo").args(["--size", uri]));
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse().unwrap())
}

fn qemu_tls_object(certs: &Path) -> String {
    format!(
        "tls-creds-x509,id=tls0,dir={},endpoint=client",
        certs.display()
    )
}

fn qemu_nbd_opts(port: u16, export: &str) -> String {
    format!("driver=nbd,host=127.0.0.1,port={port},export={export},tls-creds=tls0")
}

#[test]
fn tls_require_serves_nbds_clients_and_refuses_plain_ones() {
    let tools = [
        ("openssl", "openssl"),
        ("nbdinfo", "libnbd-bin"),
        ("nbdcopy", "libnbd-bin"),
        ("qemu-img", "qemu-utils"),
    ];
    if !have(&tools) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = pool(dir.path());
    let certs = certificates(dir.path());
    let flags = tls_flags(&certs, "require");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start(&home, "127.0.0.1", &flags);
    let port = server.port;
    let tls_uri = format!(
        "nbds://127.0.0.1:{port}/tank/vol?tls-certificates={}",
        certs.display()
    );

    assert_eq!(nbdinfo_size(&tls_uri), Ok(16 * MIB));
    let plain = nbdinfo_size(&format!("nbd://127.0.0.1:{port}/tank/vol"));
    assert!(
        plain.is_err(),
        "a plain client was served under --tls=require"
    );

    // nbdcopy in and out over TLS.
    let data: Vec<u8> = (0..16 * MIB).map(|i| (i * 31 % 253) as u8).collect();
    let img = dir.path().join("in.raw");
    std::fs::write(&img, &data).unwrap();
    succeeds(Command::new("nbdcopy").args([img.to_str().unwrap(), &tls_uri]));
    let back = dir.path().join("back.raw");
    succeeds(Command::new("nbdcopy").args([&tls_uri, back.to_str().unwrap()]));
    assert!(
        std::fs::read(&back).unwrap() == data,
        "nbdcopy over TLS read back other bytes"
    );

    // qemu-img with tls-creds-x509 reads it back too.
    let via_qemu = dir.path().join("qemu.raw");
    succeeds(Command::new("qemu-img").args([
        "convert",
        "--object",
        &qemu_tls_object(&certs),
        "--image-opts",
        &qemu_nbd_opts(port, "tank/vol"),
        "-O",
        "raw",
        via_qemu.to_str().unwrap(),
    ]));
    assert!(
        std::fs::read(&via_qemu).unwrap() == data,
        "qemu-img over TLS read other bytes"
    );
    server.stop();
}

#[test]
fn tls_on_serves_both_and_read_only_exports_refuse_writes() {
    let tools = [
        ("openssl", "openssl"),
        ("nbdinfo", "libnbd-bin"),
        ("nbdcopy", "libnbd-bin"),
        ("qemu-img", "qemu-utils"),
    ];
    if !have(&tools) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = pool(dir.path());
    let certs = certificates(dir.path());
    let mut flags = tls_flags(&certs, "on");
    flags.extend(["--nbd-read-only".to_string(), "tank/ro".to_string()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start(&home, "127.0.0.1", &flags);
    let port = server.port;
    let certs_q = format!("tls-certificates={}", certs.display());

    assert_eq!(
        nbdinfo_size(&format!("nbd://127.0.0.1:{port}/tank/vol")),
        Ok(16 * MIB)
    );
    assert_eq!(
        nbdinfo_size(&format!("nbds://127.0.0.1:{port}/tank/vol?{certs_q}")),
        Ok(16 * MIB)
    );

    // The read-only export says so and refuses writes, plain or over TLS.
    let info = succeeds(Command::new("nbdinfo").args([
        "--json",
        &format!("nbds://127.0.0.1:{port}/tank/ro?{certs_q}"),
    ]));
    let js: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(js["exports"][0]["is_read_only"], true, "{js}");
    let img = dir.path().join("in.raw");
    std::fs::write(&img, vec![0x5a; MIB as usize]).unwrap();
    let refused = run(Command::new("nbdcopy").args([
        img.to_str().unwrap(),
        &format!("nbd://127.0.0.1:{port}/tank/ro"),
    ]));
    assert!(
        !refused.status.success(),
        "nbdcopy wrote to a read-only export"
    );
    let refused = run(Command::new("qemu-img").args([
        "convert",
        "-n",
        "--object",
        &qemu_tls_object(&certs),
        "-f",
        "raw",
        img.to_str().unwrap(),
        "--target-image-opts",
        &qemu_nbd_opts(port, "tank/ro"),
    ]));
    assert!(
        !refused.status.success(),
        "qemu-img wrote to a read-only export"
    );
    // The other volume still takes writes.
    succeeds(Command::new("nbdcopy").args([
        img.to_str().unwrap(),
        &format!("nbds://127.0.0.1:{port}/tank/vol?{certs_q}"),
    ]));
    server.stop();
}

#[test]
fn tls_verify_peer_serves_only_clients_with_a_certificate_from_the_ca() {
    if !have(&[("openssl", "openssl"), ("nbdinfo", "libnbd-bin")]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = pool(dir.path());
    let certs = certificates(dir.path());
    let client = client_certificate(&certs);
    let mut flags = tls_flags(&certs, "require");
    let ca = certs.join("ca-cert.pem").display().to_string();
    flags.extend(["--tls-verify-peer".to_string(), "--tls-ca".to_string(), ca]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = Server::start(&home, "127.0.0.1", &flags);
    let port = server.port;
    let uri = |dir: &Path| {
        format!(
            "nbds://127.0.0.1:{port}/tank/vol?tls-certificates={}",
            dir.display()
        )
    };
    assert_eq!(nbdinfo_size(&uri(&client)), Ok(16 * MIB));
    assert!(
        nbdinfo_size(&uri(&certs)).is_err(),
        "a client without a certificate was served under --tls-verify-peer"
    );
    server.stop();
}

#[test]
fn an_allow_list_without_loopback_refuses_and_an_exposed_listener_warns() {
    if !have(&[("nbdinfo", "libnbd-bin")]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = pool(dir.path());
    let server = Server::start(&home, "0.0.0.0", &["--nbd-allow", "192.0.2.0/24"]);
    let port = server.port;
    let refused = nbdinfo_size(&format!("nbd://127.0.0.1:{port}/tank/vol"));
    assert!(refused.is_err(), "a client outside --nbd-allow was served");
    let log = server.stop();
    assert!(
        log.contains("refused an NBD connection from 127.0.0.1"),
        "server log:\n{log}\nnbdinfo said: {refused:?}"
    );
    assert!(log.contains("warning: NBD on 0.0.0.0"), "{log}");

    // Allowed (and on loopback: no warning), it serves.
    let server = Server::start(&home, "127.0.0.1", &["--nbd-allow", "127.0.0.0/8"]);
    let port = server.port;
    assert_eq!(
        nbdinfo_size(&format!("nbd://127.0.0.1:{port}/tank/vol")),
        Ok(16 * MIB)
    );
    let log = server.stop();
    assert!(!log.contains("warning"), "{log}");
}

#[test]
fn bad_tls_flags_say_what_to_do() {
    if !have(&[("openssl", "openssl")]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = pool(dir.path());
    let certs = certificates(dir.path());
    let path = |name: &str| certs.join(name).display().to_string();
    let fails = |args: &[&str], expect: &str| {
        let mut all = vec!["serve", "--nbd", "127.0.0.1:0", "--duration", "5"];
        all.extend_from_slice(args);
        all.push("tank");
        let out = cairn(&home, &all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(
            err.contains(expect),
            "{args:?}: expected '{expect}' in: {err}"
        );
    };
    fails(
        &["--tls=require"],
        "--tls=require needs --tls-cert FILE and --tls-key FILE",
    );
    let (cert, key, other) = (
        path("server-cert.pem"),
        path("server-key.pem"),
        path("other-key.pem"),
    );
    fails(&["--tls-cert", &cert, "--tls-key", &key], "add --tls=on");
    fails(
        &[
            "--tls=on",
            "--tls-cert",
            "/nonexistent/cert.pem",
            "--tls-key",
            &key,
        ],
        "/nonexistent/cert.pem",
    );
    fails(
        &["--tls=on", "--tls-cert", &cert, "--tls-key", &other],
        "does not go with the certificate",
    );
    fails(
        &["--tls=on", "--tls-cert", &key, "--tls-key", &key],
        "holds no PEM CERTIFICATE",
    );
    fails(&["--nbd-allow", "example.com"], "is not an IP address");
    fails(
        &["--nbd-read-only", "tank/nope"],
        "--nbd-read-only tank/nope: no such volume",
    );
}
