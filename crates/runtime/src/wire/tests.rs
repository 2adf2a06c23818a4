use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn open() -> AcceptConfig {
    AcceptConfig::new(1 << 20, 64 << 20)
}

async fn listener(cfg: AcceptConfig) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(accept_loop(l, cfg, "test-node".into(), |conn| async move {
        let tag = format!("{}:{}", conn.peer.role, conn.peer.principal);
        let activity = conn.activity();
        let mut framed = Guarded::new(conn.framed, activity, &conn.limits, conn.peer.addr)
            .holding(conn.admission);
        // Echo frames back, prefixed with who we think the peer is.
        while let Some(Ok(f)) = framed.next().await {
            let mut out = tag.clone().into_bytes();
            out.extend_from_slice(&f);
            if framed.send(Bytes::from(out)).await.is_err() {
                break;
            }
        }
    }));
    addr
}

fn client(token: Option<&str>) -> DialConfig {
    DialConfig {
        principal: "k1".into(),
        ..DialConfig::new(Role::Client, token.map(str::to_string))
    }
}

#[tokio::test]
async fn hello_then_frames_flow_and_the_peer_is_known() {
    let addr = listener(open()).await.to_string();
    let (mut f, node) = connect(&addr, &client(None), "t").await.unwrap();
    assert_eq!(node, "test-node");
    f.send(Bytes::from_static(b"ping")).await.unwrap();
    assert_eq!(&f.next().await.unwrap().unwrap()[..], b"client:k1ping");
}

#[tokio::test]
async fn each_role_must_present_its_own_token() {
    let mut cfg = open();
    cfg.credentials = Credentials {
        client_token: Some("c-secret".into()),
        server_token: Some("s-secret".into()),
    };
    let addr = listener(cfg).await.to_string();
    let err = connect(&addr, &client(None), "t").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::RpcRefused);
    assert!(err.to_string().contains("token"), "{err}");
    connect(&addr, &client(Some("c-secret")), "t")
        .await
        .unwrap();
    // The client token does not open the server role.
    let as_server = DialConfig::new(Role::Server, Some("c-secret".into()));
    let err = connect(&addr, &as_server, "t").await.unwrap_err();
    assert!(err.to_string().contains("server_token"), "{err}");
    let (mut f, _) = connect(
        &addr,
        &DialConfig::new(Role::Server, Some("s-secret".into())),
        "s9",
    )
    .await
    .unwrap();
    f.send(Bytes::from_static(b"!")).await.unwrap();
    assert_eq!(&f.next().await.unwrap().unwrap()[..], b"server:s9!");
}

#[tokio::test]
async fn an_older_peer_is_told_the_versions() {
    let addr = listener(open()).await;
    // A version-1 hello: magic, version, token, who.
    let mut body = b"GRIDWISE".to_vec();
    body.extend_from_slice(&1u32.to_le_bytes());
    body.push(0);
    body.extend_from_slice(&3u64.to_le_bytes());
    body.extend_from_slice(b"old");
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&(body.len() as u32).to_be_bytes())
        .await
        .unwrap();
    s.write_all(&body).await.unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.unwrap();
    let mut reply = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut reply).await.unwrap();
    match bincode::deserialize::<HelloReply>(&reply).unwrap() {
        HelloReply::Refused { message, .. } => {
            assert!(message.contains("version mismatch"), "{message}");
            assert!(message.contains("speaks 1"), "{message}");
        }
        HelloReply::Welcome { .. } => panic!("an old hello was welcomed"),
    }
}

#[tokio::test]
async fn garbage_does_not_stop_the_listener() {
    let addr = listener(open()).await;
    for junk in [
        &b"\xff\xff\xff\xffxxxx"[..],
        b"\x00\x00\x00\x04abcd",
        b"GET / HTTP/1.1\r\n\r\n",
    ] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(junk).await.unwrap();
    }
    connect(&addr.to_string(), &client(None), "t")
        .await
        .unwrap();
}

#[tokio::test]
async fn a_full_daemon_says_so_and_makes_room_from_idle_connections() {
    let mut cfg = open();
    cfg.limits.max_connections = 2;
    let addr = listener(cfg).await.to_string();
    let (mut a, _) = connect(&addr, &client(None), "a").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (_b, _) = connect(&addr, &client(None), "b").await.unwrap();
    // Both are idle: a third connection closes the longest-idle one (a).
    let (mut c, _) = connect(&addr, &client(None), "c").await.unwrap();
    c.send(Bytes::from_static(b"x")).await.unwrap();
    assert!(c.next().await.unwrap().is_ok());
    let gone = tokio::time::timeout(Duration::from_secs(5), async {
        let _ = a.send(Bytes::from_static(b"x")).await;
        loop {
            match a.next().await {
                None | Some(Err(_)) => return true,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(gone.unwrap_or(false), "the idle connection was not closed");
}

#[tokio::test]
async fn connecting_to_nothing_says_where() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    let err = connect(&addr, &client(None), "t").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::CommunicationFailed);
    assert!(err.is_unreachable());
    assert!(err.to_string().contains(&addr));
}

#[test]
fn frame_limits_outside_the_useful_range_are_refused() {
    assert!(
        check_max_frame(0)
            .unwrap_err()
            .contains("max_frame_bytes = 0")
    );
    assert!(check_max_frame(1 << 30).is_ok());
    assert!(check_max_frame(1 << 33).is_err());
}
