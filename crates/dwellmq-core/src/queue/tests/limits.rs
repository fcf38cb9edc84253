//! Length limits and their overflow modes, and settings changed at runtime.

use super::*;

#[test]
fn drop_head_dead_letters_the_oldest() {
    let mut q = Q::new(
        QueueSettings {
            max_length: Some(2),
            dead_letter: dlx(),
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    for b in ["a", "b", "c"] {
        assert_eq!(
            q.publish(message(b, None), 0, &mut fx),
            PublishOutcome::Accepted
        );
    }
    assert_eq!(summary(&mut fx), ["dead maxlen a"]);
    assert_eq!(q.ready(), 2);
}

#[test]
fn max_length_bytes_counts_bodies() {
    let mut q = Q::new(
        QueueSettings {
            max_length_bytes: Some(5),
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    q.publish(message("abc", None), 0, &mut fx);
    q.publish(message("def", None), 0, &mut fx);
    assert_eq!(summary(&mut fx), ["dropped maxlen"]);
    assert_eq!(q.ready_bytes(), 3);
}

#[test]
fn reject_publish_refuses_and_reject_publish_dlx_also_dead_letters() {
    for (overflow, expected) in [
        (Overflow::RejectPublish, vec![]),
        (
            Overflow::RejectPublishDlx,
            vec!["dead maxlen b".to_string()],
        ),
    ] {
        let mut q = Q::new(
            QueueSettings {
                max_length: Some(1),
                overflow,
                dead_letter: dlx(),
                ..Default::default()
            },
            false,
            0,
        );
        let mut fx = Effects::new();
        assert_eq!(
            q.publish(message("a", None), 0, &mut fx),
            PublishOutcome::Accepted
        );
        assert_eq!(
            q.publish(message("b", None), 0, &mut fx),
            PublishOutcome::Rejected
        );
        assert_eq!(summary(&mut fx), expected);
        assert_eq!(q.ready(), 1);
    }
}

#[test]
fn new_settings_apply_at_once_to_length_and_deadlines() {
    let mut q = Q::new(QueueSettings::default(), false, 0);
    let mut fx = Effects::new();
    for b in ["a", "b", "c"] {
        q.publish(message(b, None), 0, &mut fx);
    }
    q.set_settings(
        QueueSettings {
            max_length: Some(1),
            expires: Some(500),
            ..Default::default()
        },
        100,
        &mut fx,
    );
    assert_eq!(
        summary(&mut fx),
        ["dropped maxlen", "dropped maxlen", "arm 600"]
    );
    assert_eq!(q.ready(), 1);
}
