#!/usr/bin/env python3
"""SQS smoke test with boto3 against a running `redrive serve` SQS endpoint.

Usage: sqs-smoke.py http://127.0.0.1:9324

Creates a queue with a RedrivePolicy to a dead-letter queue, sends, receives (checking
MD5OfBody and MD5OfMessageAttributes), deletes; then sends a poison message and receives
it maxReceiveCount+1 times with VisibilityTimeout=0 until it moves, and checks that it is
in the dead-letter queue with its DeadLetterQueueSourceArn, and moves it back with a
message move task. Then a FIFO queue: two
messages of one group come in order, a receive retried with the same
ReceiveRequestAttemptId returns the same messages and receipt handles, and a repeated
deduplication id is not enqueued again. Then PurgeQueue removes a message in flight too,
and its receipt handle goes stale. Exits non-zero on failure.
"""

import hashlib
import json
import struct
import sys
import time
import uuid

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError


def md5_of_attributes(attrs):
    """MD5OfMessageAttributes, as the AWS documentation defines it."""
    buf = b""
    for name in sorted(attrs):
        value = attrs[name]
        dtype = value["DataType"]
        buf += struct.pack(">I", len(name.encode())) + name.encode()
        buf += struct.pack(">I", len(dtype.encode())) + dtype.encode()
        if "BinaryValue" in value:
            data = value["BinaryValue"]
            buf += b"\x02" + struct.pack(">I", len(data)) + data
        else:
            data = value["StringValue"].encode()
            buf += b"\x01" + struct.pack(">I", len(data)) + data
    return hashlib.md5(buf).hexdigest()


def fifo_check(sqs, run):
    """Order within a message group, receive retries, and deduplication, on a FIFO queue."""
    url = sqs.create_queue(
        QueueName=f"smoke-{run}.fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    first = sqs.send_message(
        QueueUrl=url, MessageBody="one", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    second = sqs.send_message(
        QueueUrl=url, MessageBody="two", MessageGroupId="g", MessageDeduplicationId="d2"
    )
    assert int(first["SequenceNumber"]) < int(second["SequenceNumber"]), (first, second)
    again = sqs.send_message(
        QueueUrl=url, MessageBody="one again", MessageGroupId="g", MessageDeduplicationId="d1"
    )
    assert again["MessageId"] == first["MessageId"], again
    got = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        MessageSystemAttributeNames=["All"],
        ReceiveRequestAttemptId=f"smoke-{run}",
    )["Messages"]
    assert [m["Body"] for m in got] == ["one", "two"], got
    assert got[0]["Attributes"]["MessageGroupId"] == "g", got[0]
    assert got[0]["Attributes"]["SequenceNumber"] == first["SequenceNumber"], got[0]
    # A retry with the same ReceiveRequestAttemptId (as after a lost answer) returns the
    # same messages with the same receipt handles.
    retried = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        MessageSystemAttributeNames=["All"],
        ReceiveRequestAttemptId=f"smoke-{run}",
    )["Messages"]
    assert [(m["MessageId"], m["ReceiptHandle"]) for m in retried] == [
        (m["MessageId"], m["ReceiptHandle"]) for m in got
    ], (got, retried)
    for m in got:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert not sqs.receive_message(QueueUrl=url).get("Messages"), "the duplicate was enqueued"
    sqs.delete_queue(QueueUrl=url)
    print(
        "fifo: a group came in order, a retried receive returned the same receipt handles, "
        "and the duplicate was not enqueued"
    )


def purge_check(sqs, run):
    """PurgeQueue removes messages in flight too; their receipt handles go stale."""
    url = sqs.create_queue(QueueName=f"smoke-purge-{run}")["QueueUrl"]
    for b in ["taken", "waiting"]:
        sqs.send_message(QueueUrl=url, MessageBody=b)
    got = sqs.receive_message(QueueUrl=url, VisibilityTimeout=600)["Messages"]
    assert [m["Body"] for m in got] == ["taken"], got
    handle = got[0]["ReceiptHandle"]
    sqs.purge_queue(QueueUrl=url)
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    assert counts == {n: "0" for n in names}, counts
    # A stale handle deletes nothing and succeeds (as on AWS); the message sent after the
    # purge stays. Its visibility cannot change: the message is not in flight.
    sqs.send_message(QueueUrl=url, MessageBody="after")
    sqs.delete_message(QueueUrl=url, ReceiptHandle=handle)
    try:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
        raise AssertionError("ChangeMessageVisibility of a purged message succeeded")
    except ClientError as e:
        assert "MessageNotInflight" in e.response["Error"]["Code"], e.response
    left = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in left] == ["after"], left
    sqs.delete_queue(QueueUrl=url)
    print("purge: the message in flight was removed and its receipt handle went stale")


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    endpoint = sys.argv[1]
    sqs = boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"max_attempts": 1}),
    )
    run = uuid.uuid4().hex[:8]
    dlq_url = sqs.create_queue(QueueName=f"smoke-dlq-{run}")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    max_receives = 2
    url = sqs.create_queue(
        QueueName=f"smoke-{run}",
        Attributes={
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receives)}
            ),
            "VisibilityTimeout": "30",
        },
    )["QueueUrl"]
    print("created", url, "with dead-letter queue", dlq_url)

    # Idempotent create; a conflicting one raises QueueNameExists.
    assert sqs.create_queue(QueueName=f"smoke-{run}")["QueueUrl"] == url
    try:
        sqs.create_queue(QueueName=f"smoke-{run}", Attributes={"VisibilityTimeout": "31"})
        raise AssertionError("conflicting CreateQueue succeeded")
    except sqs.exceptions.QueueNameExists:
        pass

    body = "hello from boto3 \u00e9\u4e2d"
    attrs = {
        "color": {"DataType": "String", "StringValue": "red"},
        "count": {"DataType": "Number", "StringValue": "42"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\x02"},
    }
    sent = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attrs)
    assert sent["MD5OfMessageBody"] == hashlib.md5(body.encode()).hexdigest(), sent
    assert sent["MD5OfMessageAttributes"] == md5_of_attributes(attrs), sent
    got = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=1,
        WaitTimeSeconds=1,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
    )["Messages"]
    assert len(got) == 1, got
    m = got[0]
    assert m["Body"] == body
    assert m["MD5OfBody"] == hashlib.md5(body.encode()).hexdigest()
    assert m["MD5OfMessageAttributes"] == md5_of_attributes(m["MessageAttributes"])
    assert m["MessageAttributes"]["blob"]["BinaryValue"] == b"\x00\x01\x02"
    assert m["Attributes"]["ApproximateReceiveCount"] == "1"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    print("sent, received (MD5s match) and deleted", m["MessageId"])

    try:
        sqs.get_queue_url(QueueName=f"missing-{run}")
        raise AssertionError("GetQueueUrl of a missing queue succeeded")
    except sqs.exceptions.QueueDoesNotExist:
        pass

    poison = sqs.send_message(QueueUrl=url, MessageBody="poison")["MessageId"]
    receives = 0
    for _ in range(max_receives + 1):
        r = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0, WaitTimeSeconds=0)
        if r.get("Messages"):
            receives += 1
    assert receives == max_receives, f"received {receives} times, expected {max_receives}"
    moved = sqs.receive_message(
        QueueUrl=dlq_url, WaitTimeSeconds=2, MessageSystemAttributeNames=["All"]
    )["Messages"]
    assert len(moved) == 1, moved
    assert moved[0]["MessageId"] == poison
    assert moved[0]["Body"] == "poison"
    source = moved[0]["Attributes"].get("DeadLetterQueueSourceArn", "")
    assert source.endswith(f":smoke-{run}"), moved[0]
    sources = sqs.list_dead_letter_source_queues(QueueUrl=dlq_url)["queueUrls"]
    assert sources == [url], sources
    print(f"poison message moved to the dead-letter queue after {receives} receives")

    # Redrive it back to its source with a message move task. The copy received above is
    # released first (visibility 0), so the task finds it.
    sqs.change_message_visibility(
        QueueUrl=dlq_url, ReceiptHandle=moved[0]["ReceiptHandle"], VisibilityTimeout=0
    )
    handle = sqs.start_message_move_task(SourceArn=dlq_arn)["TaskHandle"]
    assert handle, handle
    for _ in range(100):
        task = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]
        if task["Status"] != "RUNNING":
            break
        time.sleep(0.05)
    assert task["Status"] == "COMPLETED", task
    assert task["ApproximateNumberOfMessagesMoved"] == 1, task
    back = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"]
    assert [m["Body"] for m in back] == ["poison"], back
    sqs.delete_message(QueueUrl=url, ReceiptHandle=back[0]["ReceiptHandle"])
    print("message move task returned the poison message to its source queue")

    fifo_check(sqs, run)
    purge_check(sqs, run)

    sqs.delete_queue(QueueUrl=url)
    sqs.delete_queue(QueueUrl=dlq_url)
    print("sqs smoke: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
