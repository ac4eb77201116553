"""Launches a heterogeneous heterodl training job on Amazon SageMaker.

Two instance groups, one image, one entry point: the heterodl launcher reads
/opt/ml/input/config/resourceconfig.json and becomes a data server on the
`data_group` hosts and a trainer on the `dnn_group` hosts. The data servers
read the training data straight from its S3 prefix (`--dataset s3://...`):
no input channel, so no host downloads the dataset before the first step
while every instance, the GPU hosts too, is billing. They sign their
requests with the job's execution role (SageMaker's container credentials),
which needs s3:ListBucket on the bucket and s3:GetObject on the prefix.
`--data-access fastfile` (FastFile mode: SageMaker streams the prefix as a
local folder) or `file` (File mode: every data host copies it first) give
the data group an input channel instead (SM_CHANNEL_TRAIN). Checkpoints go
to /opt/ml/checkpoints (synced with --checkpoint-s3-uri, so a restarted spot
job resumes) and the final weights to /opt/ml/model.

    python examples/sagemaker/launch.py --image ECR_URI --role ROLE_ARN \
        --train s3://bucket/imagenet/train --output s3://bucket/heterodl \
        --data-instance ml.c5.9xlarge --data-count 1 --dnn-instance ml.p3.2xlarge

`--dry-run` prints the CreateTrainingJob request the SDK would send, without
calling AWS (tests/examples/examples_test.py checks it).

The job's metrics (step time, data wait, stall, images/s, loss) reach
CloudWatch and the SageMaker console through METRIC_DEFINITIONS: regular
expressions over the log lines the trainer's leader already writes, one
per step, and the summary at the end (docs/operations.md, "Monitoring").
"""

import argparse
import json
import logging
import os

os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
# The SDK reports, on stdout, that it found no defaults file; --dry-run's
# stdout is the request alone.
logging.getLogger("sagemaker.config").disabled = True

import boto3  # noqa: E402
import sagemaker  # noqa: E402
from sagemaker.estimator import Estimator, _TrainingJob  # noqa: E402
from sagemaker.inputs import TrainingInput  # noqa: E402
from sagemaker.instance_group import InstanceGroup  # noqa: E402


# SageMaker reads each metric from the first capture group of its regex in
# every log line of the job's hosts. The leader's progress line is
#   epoch 0 step 4/30  loss 2.3012  lr 0.04878  step 83.8 ms  95 img/s  data wait 3.6 ms (4%)
# and its last line `summary {JSON of the run}`; the tests check these
# against a recorded log and the same run's metrics file.
METRIC_DEFINITIONS = [
    {"Name": "heterodl:step_ms", "Regex": r" step \d+/\d+ .* step ([0-9.]+) ms "},
    {"Name": "heterodl:images_per_sec", "Regex": r" step \d+/\d+ .* ([0-9.]+) img/s "},
    {"Name": "heterodl:data_wait_ms", "Regex": r" data wait ([0-9.]+) ms \("},
    {"Name": "heterodl:data_stall_percent", "Regex": r" data wait [0-9.]+ ms \(([0-9.]+)%\)"},
    {"Name": "heterodl:loss", "Regex": r" step \d+/\d+  loss ([0-9.]+) "},
    # JSON numbers may have an exponent (a stall of 1e-05 percent).
    {"Name": "heterodl:run_images_per_sec",
     "Regex": r' summary \{.*"images_per_sec":([0-9.eE+-]+)'},
    {"Name": "heterodl:run_data_stall_percent",
     "Regex": r' summary \{.*"data_stall_percent":([0-9.eE+-]+)'},
]


def build_estimator(args, session):
    groups = [
        InstanceGroup("data_group", args.data_instance, args.data_count),
        InstanceGroup("dnn_group", args.dnn_instance, args.dnn_count),
    ]
    return Estimator(
        image_uri=args.image,
        role=args.role,
        instance_groups=groups,
        # The image's entry point is the heterodl launcher: its own flags,
        # then the trainer's (`heterodl launch [--dataset URL] -- FLAGS`).
        container_entry_point=["heterodl", "launch"],
        container_arguments=(["--dataset", args.train] if args.data_access == "s3" else []) +
        ["--", "--model", args.model, "--epochs", str(args.epochs),
         "--batch-size", str(args.batch_size)],
        # The bucket's region signs the requests (SageMaker's own variables
        # do not always name it).
        environment={"AWS_REGION": args.region},
        output_path=args.output,
        checkpoint_s3_uri=args.checkpoint_s3_uri or f"{args.output.rstrip('/')}/checkpoints",
        max_run=args.max_run,
        metric_definitions=METRIC_DEFINITIONS,
        sagemaker_session=session,
    )


def train_inputs(args):
    """The input channels: none when the data servers read S3 themselves;
    otherwise one for the data group only (it alone reads the images)."""
    if args.data_access == "s3":
        return None
    mode = {"fastfile": "FastFile", "file": "File"}[args.data_access]
    return {"train": TrainingInput(args.train, instance_groups=["data_group"], input_mode=mode)}


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--image", required=True, help="ECR URI of the heterodl image")
    parser.add_argument("--role", required=True, help="SageMaker execution role ARN")
    parser.add_argument("--train", required=True, help="S3 prefix of the training images")
    parser.add_argument("--data-access", choices=["s3", "fastfile", "file"], default="s3",
                        help="s3: the data servers read the prefix themselves; fastfile/file: "
                             "an input channel of that SageMaker mode")
    parser.add_argument("--output", required=True, help="S3 prefix for model and checkpoints")
    parser.add_argument("--checkpoint-s3-uri", default="",
                        help="where SageMaker syncs the checkpoints (empty: none)")
    parser.add_argument("--data-instance", default="ml.c5.9xlarge", help="the data group's instance type")
    parser.add_argument("--data-count", type=int, default=1, help="data group instances")
    parser.add_argument("--dnn-instance", default="ml.p3.2xlarge", help="the dnn group's (GPU) instance type")
    parser.add_argument("--dnn-count", type=int, default=1, help="dnn group instances")
    parser.add_argument("--model", default="resnet50", help="heterodl train --model")
    parser.add_argument("--epochs", type=int, default=90, help="epochs to train")
    parser.add_argument("--batch-size", type=int, default=256, help="samples per batch, per GPU")
    parser.add_argument("--max-run", type=int, default=3 * 24 * 3600, help="the job's time limit, seconds")
    parser.add_argument("--region", default="us-east-1", help="the AWS region")
    parser.add_argument("--job-name", default="heterodl", help="the training job's name prefix")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the CreateTrainingJob request; call nothing")
    args = parser.parse_args()

    if args.dry_run:
        # Dummy credentials: nothing below talks to AWS.
        boto_session = boto3.Session(region_name=args.region, aws_access_key_id="dry-run",
                                     aws_secret_access_key="dry-run")
        bucket = args.output.split("/")[2]
        session = sagemaker.Session(boto_session=boto_session, default_bucket=bucket)
        estimator = build_estimator(args, session)
        estimator._prepare_for_training(job_name=args.job_name)
        train_args = _TrainingJob._get_train_args(estimator, train_inputs(args),
                                                  experiment_config=None)
        request = session._get_train_request(**train_args)
        print(json.dumps(request, indent=2, default=str))
        return
    estimator = build_estimator(args, sagemaker.Session(boto3.Session(region_name=args.region)))
    estimator.fit(train_inputs(args), job_name=args.job_name, wait=False)
    print(f"started {estimator.latest_training_job.name}")


if __name__ == "__main__":
    main()
