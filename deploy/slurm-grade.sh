#!/bin/bash
# Grade a class as a Slurm job array: one array task per shard, then one merge.
#
#   jid=$(sbatch --parsable --array=0-7 deploy/slurm-grade.sh /shared/submitted /shared/grading)
#   sbatch --dependency=afterok:$jid --job-name=tc-merge --wrap \
#       'source ~/transformer-course/.venv/bin/activate && transformer-course merge /shared/grading/graded-*/ --out /shared/grading/graded'
#
# (add --gradebook sqlite:///gradebook.db to the merge to fill nbgrader's gradebook, once)
#
# The number of shards is the array's size: `--array=0-(N-1)` on the command line is all that
# changes N. Task i grades the students that `sha256(student id) mod N` puts in shard i, so the
# split does not depend on which node runs which task, and a student added to the class moves
# no one else. Both folders must be on a filesystem every node sees; each task writes only its
# own graded-<i>/ (resumable: a requeued task picks up where it stopped).
#
# Every node must run the same checkout of the course (or the same container image): each
# shard records the course's fingerprint, and the merge refuses shards of different versions,
# limits or sandboxes, a missing or duplicated shard, and a student graded twice.
#
#SBATCH --job-name=tc-grade
#SBATCH --cpus-per-task=4          # --jobs below: one notebook per CPU
#SBATCH --mem=16G                  # about --memory-mb (3 GiB) per notebook, plus the grader
#SBATCH --time=02:00:00
#SBATCH --output=tc-grade-%A_%a.log
#SBATCH --requeue                  # a preempted task starts again and resumes from its cache

set -euo pipefail

SUBMITTED=${1:?usage: sbatch --array=0-N-1 deploy/slurm-grade.sh SUBMITTED_DIR OUTPUT_DIR}
OUTPUT=${2:?usage: sbatch --array=0-N-1 deploy/slurm-grade.sh SUBMITTED_DIR OUTPUT_DIR}
: "${SLURM_ARRAY_TASK_ID:?submit this script as an array job: sbatch --array=0-7 ...}"

# the array must be 0-(N-1), no gaps (a throttle like 0-7%4 is fine): N is the largest index
# plus one. An array with gaps leaves shards ungraded, and the merge says which are missing.
SHARDS=$((SLURM_ARRAY_TASK_MAX + 1))

# the course's environment: a checkout with its virtual environment, the same on every node
COURSE=${COURSE:-$HOME/transformer-course}
source "$COURSE/.venv/bin/activate"
export TRANSFORMER_COURSE_ROOT=$COURSE
export TRANSFORMER_COURSE_DATA=${TRANSFORMER_COURSE_DATA:-$COURSE/data}   # Tiny Shakespeare, never downloaded here
export OMP_NUM_THREADS=1

transformer-course grade "$SUBMITTED" \
    --out "$OUTPUT/graded-$SLURM_ARRAY_TASK_ID" \
    --shard "$SLURM_ARRAY_TASK_ID/$SHARDS" \
    --jobs "${SLURM_CPUS_PER_TASK:-1}"
