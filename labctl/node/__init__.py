"""What labctl gives every node (settings, node-side code) and how it
reaches and reads back from one (ssh, ready lines, replies, processes).
"""
